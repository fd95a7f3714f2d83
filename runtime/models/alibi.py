"""The ALiBi families on the GPT layers (gpt_layers.py): no position embeddings; each head's scores biased by
slope_h * (key position - query position) (config.alibi_slopes, alibi_config.py), declared once to the attention
backend (set_layer_variants), which adds it in every kernel (the torch reference, Triton; the native CPU kernels hand
those layers to the torch reference).  Positions are absolute, so prefix caching and chunked prefill are unaffected.

BLOOM (HF BloomForCausalLM): a LayerNorm on the word embeddings, pre-LayerNorms with biases, a fused query_key_value
whose rows keep each head's q, k and v together (split_qkv's per_head), dense, the MLP dense_h_to_4h -> gelu-tanh ->
dense_4h_to_h, biases everywhere, a final ln_f, the lm head tied to the embeddings.
MPT (HF MptForCausalLM): LayerNorms without bias (norm_1, norm_2, norm_f), Wqkv = [q; k; v] rows (clamped to
+-clip_qkv where set), out_proj, up_proj -> exact gelu -> down_proj, no biases, the lm head tied.
Notation as in llama.py: T tokens, H hidden.
"""

from typing import Optional

import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gpt_layers import GptForCausalLM
from .layernorm_model import LayerNorm


class AlibiForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with ALiBi slopes on every layer and no positions."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        slopes = torch.tensor(config.alibi_slopes, dtype=torch.float32, device=device)  # [Hq]
        attn_backend.set_layer_variants(config.layer_windows or [None] * config.num_layers, alibi=slopes)


class BloomForCausalLM(AlibiForCausalLM):
    """AlibiForCausalLM with BLOOM's names and its LayerNorm on the word embeddings."""

    PREFIX = "transformer."
    NAMES = ((r"word_embeddings\.", "model.embed_tokens."),
             (r"word_embeddings_layernorm\.", "model.embed_layernorm."), (r"ln_f\.", "model.norm."),
             (r"h\.(\d+)\.(input_layernorm|post_attention_layernorm)\.", r"model.layers.\1.\2."),
             (r"h\.(\d+)\.self_attention\.query_key_value\.", r"model.layers.\1.self_attn.qkv."),
             (r"h\.(\d+)\.self_attention\.dense\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.dense_h_to_4h\.", r"model.layers.\1.mlp.c_fc."),
             (r"h\.(\d+)\.mlp\.dense_4h_to_h\.", r"model.layers.\1.mlp.c_proj."))
    PER_HEAD_QKV = True

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        self.embed_layernorm = LayerNorm(config.hidden_size, config.rms_norm_eps, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embed_layernorm(super().embed_inputs(fb))  # [T, H]

    def _weight_targets(self) -> dict:
        return dict(super()._weight_targets(), **self.embed_layernorm.targets("model.embed_layernorm"))


class MptForCausalLM(AlibiForCausalLM):
    """AlibiForCausalLM with MPT's names; its LayerNorms' biases stay zero (HF's have none)."""

    PREFIX = "transformer."
    NAMES = ((r"wte\.", "model.embed_tokens."), (r"norm_f\.", "model.norm."),
             (r"blocks\.(\d+)\.norm_1\.", r"model.layers.\1.input_layernorm."),
             (r"blocks\.(\d+)\.norm_2\.", r"model.layers.\1.post_attention_layernorm."),
             (r"blocks\.(\d+)\.attn\.Wqkv\.", r"model.layers.\1.self_attn.qkv."),
             (r"blocks\.(\d+)\.attn\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"blocks\.(\d+)\.ffn\.up_proj\.", r"model.layers.\1.mlp.c_fc."),
             (r"blocks\.(\d+)\.ffn\.down_proj\.", r"model.layers.\1.mlp.c_proj."))

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        with torch.no_grad():
            self.norm_bias.zero_()
            for layer in self.layers:
                layer.input_layernorm.bias.zero_()
                layer.post_attention_layernorm.bias.zero_()

    def _weight_targets(self) -> dict:
        return {name: t for name, t in super()._weight_targets().items() if not name.endswith("norm.bias")}
