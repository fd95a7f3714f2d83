"""GPT-NeoX (HF GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B), GPT-J (HF GPTJForCausalLM) and CodeGen (HF CodeGenForCausalLM:
GPT-J's layer, its q, v and k rows fused per model-parallel shard) on the GPT layers
(gpt_layers.py): rotary embeddings on the first config.rotary_dim dims of each head, LayerNorms with biases.

GPT-NeoX: a fused query_key_value whose rows keep each head's q, k and v together (split_qkv's per_head), rotate-half
rope, attention_bias on query_key_value and dense, the MLP dense_h_to_4h -> act -> dense_4h_to_h with biases, and the
parallel residual x + attn(ln_1(x)) + mlp(ln_2(x)) (use_parallel_residual; else sequential); an untied embed_out.
GPT-J: q/k/v/out projections without biases, rope on interleaved pairs (dims 2i and 2i+1) run as rotate-half on q/k
rows reordered at load (interleaved_rope.py), fc_in -> gelu_new -> fc_out with biases, one LayerNorm read by attention
and the MLP in parallel, x + attn(ln_1(x)) + mlp(ln_1(x)), and an lm head with a bias.
Notation as in llama.py: T tokens, H hidden.
"""

import torch
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gpt_config import CODEGEN_SHARDS
from .gpt_layers import GptForCausalLM, GptLayer
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary


class ParallelGptLayer(GptLayer):
    """x + attn(ln_1(x)) + mlp(ln_2(x)); with one norm (GPT-J, post_attention_layernorm None) both read ln_1(x)."""

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.input_layernorm(x)  # [T, H]
        h_mlp = h if self.post_attention_layernorm is None else self.post_attention_layernorm(x)  # [T, H]
        return x + self.self_attn(h, rotary, fb) + self.mlp(h_mlp)  # [T, H]


class GPTNeoXForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with GPT-NeoX's names and residuals."""

    PREFIX = "gpt_neox."
    NAMES = ((r"embed_in\.", "model.embed_tokens."), (r"final_layer_norm\.", "model.norm."),
             (r"embed_out\.", "lm_head."),
             (r"layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.", r"model.layers.\1.\2."),
             (r"layers\.(\d+)\.attention\.query_key_value\.", r"model.layers.\1.self_attn.qkv."),
             (r"layers\.(\d+)\.attention\.dense\.", r"model.layers.\1.self_attn.o_proj."),
             (r"layers\.(\d+)\.mlp\.dense_h_to_4h\.", r"model.layers.\1.mlp.c_fc."),
             (r"layers\.(\d+)\.mlp\.dense_4h_to_h\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = r"layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)"
    PER_HEAD_QKV = True

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer_class = ParallelGptLayer if self.config.parallel_residual else GptLayer
        return layer_class(self.config, layer_id, attn_backend, dtype, device)


class GPTJForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with GPT-J's names, parallel layers and interleaved rope."""

    LM_HEAD_BIAS = True
    PREFIX = "transformer."
    NAMES = ((r"wte\.", "model.embed_tokens."), (r"ln_f\.", "model.norm."),
             (r"h\.(\d+)\.ln_1\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.attn\.([qkv])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
             (r"h\.(\d+)\.attn\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.fc_in\.", r"model.layers.\1.mlp.c_fc."),
             (r"h\.(\d+)\.mlp\.fc_out\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = r"h\.\d+\.attn\.(bias|masked_bias|embed_positions)"

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer = ParallelGptLayer(self.config, layer_id, attn_backend, dtype, device)
        layer.post_attention_layernorm = None
        return layer

    def convert(self, name: str, tensor: torch.Tensor) -> list:
        if ".self_attn.q_proj." in name or ".self_attn.k_proj." in name:
            c = self.config
            tensor = reorder_head_dims(name, tensor, interleaved_to_half_order(c.head_dim, c.rope_dim))
        return super().convert(name, tensor)


class CodeGenForCausalLM(GPTJForCausalLM):
    """GPT-J's contract with CodeGen's names: qkv_proj's rows [q; v; k] within each of its CODEGEN_SHARDS shards
    (split_codegen_qkv), out_proj, fc_in/fc_out, ln_1, ln_f."""

    NAMES = GPTJForCausalLM.NAMES + ((r"h\.(\d+)\.attn\.qkv_proj\.", r"model.layers.\1.self_attn.qkv_mp."),)
    SKIPPED = r"h\.\d+\.attn\.(causal_mask|masked_bias|bias)"

    def convert(self, name: str, tensor: torch.Tensor) -> list:
        if ".qkv_mp." not in name:
            return super().convert(name, tensor)
        rows = tensor.unflatten(0, (CODEGEN_SHARDS, 3, -1))  # [shards, 3 (q, v, k), H/shards, H]
        parts = {p: rows[:, i].flatten(0, 1) for i, p in enumerate("qvk")}  # [H, H] each
        convert = super().convert   # q and k: reordered for GPT-J's interleaved rope
        return [pair for p in "qkv" for pair in convert(name.replace(".qkv_mp.", f".{p}_proj."), parts[p])]
