"""Gemma 4's decoder layer in plain torch (HF modeling_gemma4.py Gemma4TextDecoderLayer), on Gemma 2's plan
(gemma2.py: four norms, each sublayer's output normed before it joins the residual stream, a gelu-tanh MLP).

Its own: RMSNorms that multiply by weight (not 1 + weight); attention with scores unscaled (1.0), per-head RMSNorms
on q and k before rope and one without weight on v, a head dim and KV head count of its own (gemma4_config.py), V
equal to K before their norms on full layers with attention_k_eq_v, and the layers that reuse an earlier layer's KV
computing only queries; experts beside the MLP (a router of its own on the residual stream, the experts on a second
pre-norm, each output normed, the sum normed again); the per-layer input (a gated projection of this layer's slice of
the per-layer embeddings, normed, added); the output times the checkpoint's layer_scalar.

The KV pool holds every layer at the largest head dim D and KV heads Hkv (ModelConfig.head_dim, num_kv_heads): a
layer's own K and V [T, h, d] are stored with each head repeated Hkv / h times (query head j still reads its own
KV head j // (Hq / h)) and zero-padded to D, queries zero-padded too, the output's first d dims kept.
Notation: T tokens, H hidden, Hq/h heads, d head dim, P per-layer input width, E experts, k top k.
"""

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma2 import GemmaMLP
from .layer_ops import Rotary
from .layers import gelu_tanh_mul, param
from .moe import grouped_experts
from .packed_linear import linear

NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
MOE_NORMS = ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2")


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """HF Gemma4RMSNorm: normalise over the last dim and multiply by weight (None: no weight), in float32, then cast
    to x.dtype."""
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return (y if weight is None else y * weight.float()).to(x.dtype)


class Gemma4Attention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        g = c.gemma4
        self.attn_backend, self.eps, self.num_heads = attn_backend, c.rms_norm_eps, c.num_heads
        self.head_dim, self.num_kv_heads = g.head_dims[layer_id], g.kv_heads[layer_id]
        self.kv_layer, self.reuses_kv, self.k_eq_v = g.kv_source[layer_id], g.reuses_kv(layer_id), g.k_eq_v[layer_id]
        self.pool_heads, self.pool_dim = c.num_kv_heads, c.head_dim
        q, kv = c.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        kv_rows = 0 if self.reuses_kv else kv * (1 if self.k_eq_v else 2)
        self.qkv_proj = param(q + kv_rows, c.hidden_size, dtype=dtype, device=device)  # [Hq*d + (1|2)*h*d, H]
        self.o_proj = param(c.hidden_size, q, dtype=dtype, device=device)  # [H, Hq*d]
        self.q_norm = param(self.head_dim, dtype=dtype, device=device)  # [d]
        self.k_norm = None if self.reuses_kv else param(self.head_dim, dtype=dtype, device=device)  # [d]
        self.gemm_rows: Optional[int] = None

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool unless it reuses an earlier layer's."""
        T, hq, h, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = linear(x, self.qkv_proj, None, self.gemm_rows)  # [T, Hq*d + kv rows]
        q = rotary.apply_(rms_norm(qkv[:, :hq * d].reshape(T, hq, d), self.q_norm, self.eps).contiguous())
        q = self._pad_dim(q)  # [T, Hq, D]
        if self.reuses_kv:
            o = self.attn_backend.attend(q, self.kv_layer, fb)  # [T, Hq, D]
        else:
            kv = qkv[:, hq * d:].reshape(T, -1, d)  # [T, h or 2h, d]
            k, v = kv[:, :h], (kv if self.k_eq_v else kv[:, h:])  # [T, h, d] each: V is K before their norms
            k = rotary.apply_(rms_norm(k, self.k_norm, self.eps).contiguous())  # [T, h, d]
            v = self.value_norm(v)  # [T, h, d]
            o = self.attn_backend.forward(q, self._to_pool(k), self._to_pool(v), self.kv_layer, fb)  # [T, Hq, D]
        return linear(o[..., :d].reshape(T, hq * d), self.o_proj, None, self.gemm_rows)  # [T, H]

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> destination of the attention's weights under `prefix` ("model.layers.{i}.self_attn.")."""
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        t = {prefix + "q_proj.weight": self.qkv_proj[:q], prefix + "o_proj.weight": self.o_proj,
             prefix + "q_norm.weight": self.q_norm}
        if not self.reuses_kv:
            t.update({prefix + "k_proj.weight": self.qkv_proj[q:q + kv], prefix + "k_norm.weight": self.k_norm})
            if not self.k_eq_v:
                t[prefix + "v_proj.weight"] = self.qkv_proj[q + kv:]
        return t

    def value_norm(self, v: torch.Tensor) -> torch.Tensor:
        """HF's v_norm: an RMSNorm without weight, [T, h, d] -> [T, h, d]."""
        return rms_norm(v, None, self.eps)

    def _pad_dim(self, x: torch.Tensor) -> torch.Tensor:
        """[T, n, d] -> [T, n, D], zeros after the first d dims."""
        return x if self.head_dim == self.pool_dim else F.pad(x, (0, self.pool_dim - self.head_dim))

    def _to_pool(self, x: torch.Tensor) -> torch.Tensor:
        """[T, h, d] -> [T, Hkv, D]: each head repeated Hkv / h times, zero-padded."""
        repeat = self.pool_heads // self.num_kv_heads
        return self._pad_dim(x if repeat == 1 else x.repeat_interleave(repeat, dim=1))


class Gemma4Experts(nn.Module):
    """The experts beside the MLP: routed on the residual stream (norm without weight, times scale / sqrt(H), softmax
    over the experts in float32, the top k renormalised, times each chosen expert's per_expert_scale), computed on
    pre_feedforward_layernorm_2's output with gelu-tanh gated experts (HF Gemma4TextRouter, Gemma4TextExperts)."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        g, hidden = c.gemma4, c.hidden_size
        self.eps, self.top_k, self.root = c.rms_norm_eps, g.top_k, hidden ** -0.5
        self.proj = param(g.num_experts, hidden, dtype=dtype, device=device)  # [E, H]
        self.scale = param(hidden, dtype=dtype, device=device)  # [H]
        self.per_expert_scale = param(g.num_experts, dtype=dtype, device=device)  # [E]
        self.w13 = param(g.num_experts, 2 * g.expert_intermediate, hidden, dtype=dtype, device=device)  # [E, 2I, H]
        self.w2 = param(g.num_experts, hidden, g.expert_intermediate, dtype=dtype, device=device)  # [E, H, I]

    def forward(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual: [T, H] the router's input, x: [T, H] the experts' -> [T, H]."""
        scores = linear(rms_norm(residual, None, self.eps) * self.scale * self.root, self.proj)  # [T, E]
        probs = torch.softmax(scores.float(), dim=-1)  # [T, E] float32
        weights, ids = torch.topk(probs, self.top_k, dim=-1)  # [T, k] each
        weights = weights / weights.sum(dim=-1, keepdim=True) * self.per_expert_scale[ids]  # [T, k]
        return grouped_experts(x, self.w13, self.w2, weights, ids, act=gelu_tanh_mul)  # [T, H]


class Gemma4DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        g = c.gemma4
        self.eps = c.rms_norm_eps
        self.norm_names = NORMS + (MOE_NORMS if g.num_experts else ())
        for name in self.norm_names:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = Gemma4Attention(c, layer_id, attn_backend, dtype, device)
        width = c.intermediate_size * (2 if g.double_wide[layer_id] else 1)
        self.mlp = GemmaMLP(with_width(c, width), dtype, device)
        self.experts = Gemma4Experts(c, dtype, device) if g.num_experts else None
        p = g.per_layer_input
        self.per_layer_input_gate = param(p, c.hidden_size, dtype=dtype, device=device) if p else None  # [P, H]
        self.per_layer_projection = param(c.hidden_size, p, dtype=dtype, device=device) if p else None  # [H, P]
        self.post_per_layer_input_norm = param(c.hidden_size, dtype=dtype, device=device) if p else None  # [H]
        self.layer_scalar = param(1, dtype=dtype, device=device)  # [1]
        self.gemm_rows: Optional[int] = None

    def forward(self, x: torch.Tensor, per_layer_input: Optional[torch.Tensor], rotary: Rotary,
                fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream, per_layer_input: [T, P] or None -> [T, H]."""
        h = self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = x + rms_norm(h, self.post_attention_layernorm, self.eps)  # [T, H]
        h = self.mlp(rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        if self.experts is not None:
            routed = self.experts(x, rms_norm(x, self.pre_feedforward_layernorm_2, self.eps))  # [T, H]
            h = (rms_norm(h, self.post_feedforward_layernorm_1, self.eps)
                 + rms_norm(routed, self.post_feedforward_layernorm_2, self.eps))  # [T, H]
        x = x + rms_norm(h, self.post_feedforward_layernorm, self.eps)  # [T, H]
        if self.per_layer_input_gate is not None:
            gate = linear(x, self.per_layer_input_gate, None, self.gemm_rows)  # [T, P]
            gate = F.gelu(gate, approximate="tanh") * per_layer_input  # [T, P]
            h = linear(gate, self.per_layer_projection, None, self.gemm_rows)  # [T, H]
            x = x + rms_norm(h, self.post_per_layer_input_norm, self.eps)  # [T, H]
        return x * self.layer_scalar  # [T, H]

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> destination of this layer's weights under `prefix` ("model.layers.{i}.")."""
        t = {prefix + name + ".weight": getattr(self, name) for name in self.norm_names}
        t.update({prefix + "layer_scalar": self.layer_scalar, **self.self_attn.checkpoint_targets(prefix + "self_attn."),
                  **mlp_targets(self.mlp, prefix + "mlp.")})
        if self.experts is not None:
            e = self.experts
            t.update({prefix + "router.proj.weight": e.proj, prefix + "router.scale": e.scale,
                      prefix + "router.per_expert_scale": e.per_expert_scale,
                      prefix + "experts.gate_up_proj": e.w13, prefix + "experts.down_proj": e.w2})
        if self.per_layer_input_gate is not None:
            t.update({prefix + "per_layer_input_gate.weight": self.per_layer_input_gate,
                      prefix + "per_layer_projection.weight": self.per_layer_projection,
                      prefix + "post_per_layer_input_norm.weight": self.post_per_layer_input_norm})
        return t


def mlp_targets(mlp: GemmaMLP, prefix: str) -> dict:
    """HF name -> destination of a gated MLP's weights under `prefix` ("model.layers.{i}.mlp.")."""
    inter = mlp.down_proj.shape[1]
    return {prefix + "gate_proj.weight": mlp.gate_up_proj[:inter], prefix + "up_proj.weight": mlp.gate_up_proj[inter:],
            prefix + "down_proj.weight": mlp.down_proj}


def with_width(c: ModelConfig, width: int) -> ModelConfig:
    return c if width == c.intermediate_size else dataclasses.replace(c, intermediate_size=width)
