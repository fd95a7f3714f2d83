"""Falcon (HF FalconForCausalLM) with rotary embeddings or ALiBi, on the GPT layers (gpt_layers.py): LayerNorms with
biases, rotate-half rope over each whole head, a fused query_key_value, dense, the MLP dense_h_to_4h -> act ->
dense_4h_to_h, biases on every linear layer where config.bias, the lm head tied to the word embeddings by default.

The layouts (gpt_config._falcon): new_decoder_architecture (Falcon 40B/180B) groups query_key_value's rows per K/V
head, [Hkv, Hq/Hkv queries + k + v, D], and reads ln_attn and ln_mlp in parallel, x + attn(ln_attn(x)) +
mlp(ln_mlp(x)) (one input_layernorm where num_ln_in_parallel_attn is 1); Falcon 7B (multi_query: all q rows, then
one k and one v head) reads one input_layernorm in parallel (parallel_attn); without multi_query each head's q, k and
v rows lie together; without parallel_attn the layer is sequential.  Falcon-RW (alibi, neither new_decoder_architecture
nor multi_query): no rotary layer; each head's scores biased as HF's build_alibi_tensor does, by the key position's
bfloat16 product with the bfloat16 slope, divided by sqrt(head_dim) (config.alibi_bf16), declared once to the
attention backend (set_layer_variants) like BLOOM's ALiBi (alibi.py).
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""

from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .gpt_layers import GptForCausalLM, GptLayer, split_qkv
from .gpt_neox import ParallelGptLayer


class FalconForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with Falcon's names, layouts and residuals."""

    PREFIX = "transformer."
    NAMES = ((r"word_embeddings\.", "model.embed_tokens."), (r"ln_f\.", "model.norm."),
             (r"h\.(\d+)\.(input_layernorm|ln_attn)\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.(post_attention_layernorm|ln_mlp)\.", r"model.layers.\1.post_attention_layernorm."),
             (r"h\.(\d+)\.self_attention\.query_key_value\.", r"model.layers.\1.self_attn.qkv."),
             (r"h\.(\d+)\.self_attention\.dense\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.dense_h_to_4h\.", r"model.layers.\1.mlp.c_fc."),
             (r"h\.(\d+)\.mlp\.dense_4h_to_h\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = r"h\.\d+\.self_attention\.(rotary_emb\.inv_freq|maybe_rotary\.inv_freq)"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        if config.alibi_slopes is not None:
            slopes = torch.tensor(config.alibi_slopes, dtype=torch.float32, device=device)  # [Hq]
            attn_backend.set_layer_variants(config.layer_windows or [None] * config.num_layers, alibi=slopes,
                                            alibi_bf16=config.alibi_bf16)

    @property
    def PER_HEAD_QKV(self) -> bool:
        return self.config.num_kv_heads == self.config.num_heads and not self.config.gpt.grouped_qkv

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        layer = (ParallelGptLayer if c.parallel_residual else GptLayer)(c, layer_id, attn_backend, dtype, device)
        if c.gpt.shared_norm:
            layer.post_attention_layernorm = None
        return layer

    def convert(self, name: str, tensor: torch.Tensor) -> list:
        c = self.config
        if ".qkv." in name and c.gpt.grouped_qkv:
            group = c.num_heads // c.num_kv_heads
            grouped = tensor.unflatten(0, (c.num_kv_heads, group + 2, c.head_dim))  # [Hkv, Hq/Hkv + 2, D, ...]
            q = grouped[:, :group].flatten(0, 2)  # [Hq*D, ...]: query head h in K/V group h // (Hq/Hkv)
            k, v = grouped[:, group].flatten(0, 1), grouped[:, group + 1].flatten(0, 1)  # [Hkv*D, ...] each
            tensor = torch.cat([q, k, v])  # [(Hq+2Hkv)*D, ...]
            return split_qkv(name, tensor, c)
        return super().convert(name, tensor)
