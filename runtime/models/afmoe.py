"""Arcee Trinity (HF AfmoeForCausalLM): pre- and post-norms around both sublayers (OLMo 2's RMSNorm, weight applied
in float32), attention with per-head q/k norms, rotary embeddings on the sliding-window layers only (the full layers
are NoPE: config.nope_layers) and its output gated by sigmoid(gate_proj(x)) before o_proj; the first
num_dense_layers layers have the dense SwiGLU MLP, the rest a SparseMoeBlock (moe_config.py: sigmoid scores, the
expert bias for the choice, renormalised, times route_scale, un-gated shared experts); embeddings times
sqrt(hidden_size) where mup_enabled (config.embedding_multiplier).

Checkpoint names are Qwen's and DeepSeek's but for the router, mlp.router.gate.weight, and the expert bias,
mlp.expert_bias [E]; attention's gate is self_attn.gate_proj.weight [Hq*D, H].  One rank (OwnLayersForCausalLM).
Notation as in llama.py.
"""

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .llama_like import RenamedCheckpoint
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .olmo2 import olmo2_rms_norm
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear


class AfmoeAttention(LlamaAttention):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.gate_proj = param(self.q_size, c.hidden_size, dtype=dtype, device=device)  # [Hq*D, H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(t, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = olmo2_rms_norm(qkv[:, :hq + hkv], self.qk_norm, self.eps)  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        gated = o.reshape(t, self.q_size) * torch.sigmoid(linear(x, self.gate_proj))  # [T, Hq*D]
        return linear(gated, self.o_proj, self.o_bias)  # [T, H]


class AfmoeDecoderLayer(nn.Module):
    """x + norm(attn(norm(x))), then x + norm(mlp(norm(x)))."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        for name in ("input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm"):
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = AfmoeAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.self_attn(olmo2_rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = x + olmo2_rms_norm(h, self.post_attention_layernorm, self.eps)  # [T, H]
        h = self.mlp(olmo2_rms_norm(x, self.pre_mlp_layernorm, self.eps))  # [T, H]
        return x + olmo2_rms_norm(h, self.post_mlp_layernorm, self.eps)  # [T, H]


class AfmoeForCausalLM(RenamedCheckpoint, ExpertLayers, OwnLayersForCausalLM):
    """MoEForCausalLM's contract (expert_load()) on one rank."""

    LAYER_KIND = "sandwich-norm"
    loads_fp8_checkpoints = False
    NAMES = {".mlp.router.gate.": ".mlp.gate."}

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = (SparseMoeBlock(c.hidden_size, c.moe, dtype, device) if layer_id in c.moe.sparse_layers
               else LlamaMLP(c, dtype, device))
        return AfmoeDecoderLayer(c, layer_id, attn_backend, mlp, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return olmo2_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            swaps += [(attn, "qkv_proj"), (attn, "o_proj"), (attn, "gate_proj")]
            if not isinstance(mlp, SparseMoeBlock):
                swaps += [(mlp, name) for name in self.MLP_LINEARS]
            else:
                swaps += [(mlp, "shared_gate_up"), (mlp, "shared_down")] if mlp.shared_gate_up is not None else []
        return swaps

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.gate_proj.weight"] = (layer.self_attn.gate_proj, False)
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + ".weight": (getattr(layer, name), False) for name in (
            "input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm")}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.", bias_name="expert_bias")
