"""Persimmon (HF PersimmonForCausalLM: Adept's Persimmon-8B, the base of Fuyu's language model): GPT-NeoX's sequential
layer (gpt_neox.py: query_key_value rows per head, rotate-half rope on the first rotary_dim dims, biases on every
projection and LayerNorm) with a relu^2 MLP and q/k LayerNorms over each head with a bias (qk_layernorm: one [D] weight
and bias shared by the heads, parallel_block.ParallelAttention's), an untied lm head without bias.
Notation as in llama.py.
"""

from torch import nn

from .gpt_layers import GptLayer
from .gpt_neox import GPTNeoXForCausalLM
from .parallel_block import ParallelAttention


class PersimmonLayer(GptLayer):
    """x + attn(ln(x)), then x + mlp(ln(x)); attention with biased per-head q/k LayerNorms where config.qk_norm."""

    def __init__(self, c, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.self_attn = ParallelAttention(c, layer_id, attn_backend, dtype, device, qk_norm_bias=True)


class PersimmonForCausalLM(GPTNeoXForCausalLM):
    """GPTNeoXForCausalLM's contract with Persimmon's names and layers."""

    PREFIX = "model."
    NAMES = ((r"embed_tokens\.", "model.embed_tokens."), (r"final_layernorm\.", "model.norm."),
             (r"layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.", r"model.layers.\1.\2."),
             (r"layers\.(\d+)\.self_attn\.query_key_value\.", r"model.layers.\1.self_attn.qkv."),
             (r"layers\.(\d+)\.self_attn\.dense\.", r"model.layers.\1.self_attn.o_proj."),
             (r"layers\.(\d+)\.self_attn\.([qk])_layernorm\.", r"model.layers.\1.self_attn.\2_norm."),
             (r"layers\.(\d+)\.mlp\.dense_h_to_4h\.", r"model.layers.\1.mlp.c_fc."),
             (r"layers\.(\d+)\.mlp\.dense_4h_to_h\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq"

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return PersimmonLayer(self.config, layer_id, attn_backend, dtype, device)

    def _weight_targets(self) -> dict:
        t, hq = super()._weight_targets(), self.config.num_heads
        for i, layer in enumerate(self.layers):
            bias = layer.self_attn.qk_bias
            if bias is not None:
                t[f"model.layers.{i}.self_attn.q_norm.bias"] = (bias[:hq], True)
                t[f"model.layers.{i}.self_attn.k_norm.bias"] = (bias[hq:], True)
        return t
