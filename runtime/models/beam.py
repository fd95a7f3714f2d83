"""Beam (HF BeamForCausalLM; fields: beam_config.py): Arcee Trinity's four-norm layer (afmoe.py: OLMo 3's RMSNorms,
per-head q/k norms, a sigmoid output gate from gate_proj) with the gate's bias per head, each sublayer's normed output
joining the residual stream scaled by depth: branch / sqrt(i) + residual * sqrt((i - 1) / i), i = 2 (layer + 1) for
attention and one more for the MLP.  The full layers have no rope and scale their queries by
(1 + (position + 1) / 2048) ** 0.1; the dense SwiGLU MLP or a SparseMoeBlock (DeepSeek-V3's routing, no shared
expert) by mlp_layer_types; logits soft-capped.  Checkpoint names are Qwen3-MoE's, plus self_attn.gate_proj.weight
[Hq*D, H] and self_attn.gate_bias [Hq], and pre_/post_feedforward_layernorm.  One rank.  Notation as in llama.py.
"""

import math

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .afmoe import AfmoeAttention, AfmoeForCausalLM
from .layer_ops import Rotary
from .layers import param, soft_cap
from .llama import LlamaMLP
from .moe import SparseMoeBlock
from .olmo2 import olmo2_rms_norm
from .packed_linear import linear

_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def nope_query_scale(positions: torch.Tensor) -> torch.Tensor:
    """Scalable softmax's factor on the queries of the layers without rope: positions [T] -> [T, 1, 1] float32."""
    return torch.exp(0.1 * torch.log1p((positions.float() + 1) / 2048))[:, None, None]


class BeamAttention(AfmoeAttention):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.gate_bias = param(c.num_heads, dtype=dtype, device=device)  # [Hq]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(t, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = olmo2_rms_norm(qkv[:, :hq + hkv], self.qk_norm, self.eps)  # [T, Hq+Hkv, D]
        q, k = (rotary.apply_(qk) if self.rope else qk).split((hq, hkv), dim=1)  # [T, Hq, D], [T, Hkv, D]
        if rotary.query_scale is not None:
            q = (q.float() * rotary.query_scale).to(q.dtype)  # [T, Hq, D]
        o = self.attn_backend.forward(q, k, qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        gate = linear(x, self.gate_proj).view(t, hq, -1) + self.gate_bias[:, None]  # [T, Hq, D]
        return linear((o * torch.sigmoid(gate)).reshape(t, self.q_size), self.o_proj, self.o_bias)  # [T, H]


class BeamLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps, self.adds = c.rms_norm_eps, (2 * (layer_id + 1), 2 * (layer_id + 1) + 1)
        for name in _NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = BeamAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.self_attn(olmo2_rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = depth_scaled_add(olmo2_rms_norm(h, self.post_attention_layernorm, self.eps), x, self.adds[0])  # [T, H]
        h = self.mlp(olmo2_rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        return depth_scaled_add(olmo2_rms_norm(h, self.post_feedforward_layernorm, self.eps), x, self.adds[1])


def depth_scaled_add(branch: torch.Tensor, residual: torch.Tensor, i: int) -> torch.Tensor:
    """The i-th residual add: branch / sqrt(i) + residual * sqrt((i - 1) / i)."""
    return branch * (1.0 / math.sqrt(i)) + residual * math.sqrt((i - 1) / i)


class BeamForCausalLM(AfmoeForCausalLM):
    """AfmoeForCausalLM's contract with Beam's layers and soft-capped logits."""

    LAYER_KIND = "depth-scaled sandwich-norm"
    NAMES = {}

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = (SparseMoeBlock(c.hidden_size, c.moe, dtype, device) if layer_id in c.moe.sparse_layers
               else LlamaMLP(c, dtype, device))
        return BeamLayer(c, layer_id, attn_backend, mlp, dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        rope, scaled = Rotary(positions, self.cos_sin), Rotary(positions, self.cos_sin, nope_query_scale(positions))
        return [scaled if i in self.config.nope_layers else rope for i in range(len(self.layers))]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return soft_cap(super().compute_logits(hidden), self.config.final_softcap)  # [N, V]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.gate_bias"] = (layer.self_attn.gate_bias, False)
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + ".weight": (getattr(layer, name), False) for name in _NORMS}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")
