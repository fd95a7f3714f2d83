"""Doge (HF DogeForCausalLM): pre-norm layers whose residuals are scaled per channel,
  x = input_residual * x + attn(norm(x));  x = post_attention_residual * x + mlp(norm(x)),
of dynamic mask attention (doge_config.py) and the dense SwiGLU MLP (mlp_bias: biases on all three).

Attention: q/k/v (biases by attention_bias), per-head RMSNorms on q and k, rope; each key's KV head h gets the score
bias dt[h] = exp(A[h] * softplus(dt_proj(v))[h]) from its own value, which HF adds to every query's score of it.  The
pool holds it as the key's extra last dim dt * sqrt(D), the queries' extra dim is 1 and the values' 0, so the kernels'
scores q.k / sqrt(D) gain exactly dt; the output's first D dims are the attention's.  One rank, op by op.
Notation: T tokens, H hidden, Hq/Hkv heads, D head dim (the pool's D + 1).
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear


class DynamicMaskAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.layer_id, self.attn_backend, self.eps = layer_id, attn_backend, c.rms_norm_eps
        self.num_heads, self.kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.doge.head_dim
        d, hq, hkv, h = self.head_dim, c.num_heads, c.num_kv_heads, c.hidden_size
        self.qkv_proj = param((hq + 2 * hkv) * d, h, dtype=dtype, device=device)  # [(Hq+2Hkv)*D, H]
        self.qkv_bias = param((hq + 2 * hkv) * d, dtype=dtype, device=device) if c.attention_bias else None
        self.q_norm = param(d, dtype=dtype, device=device)  # [D]
        self.k_norm = param(d, dtype=dtype, device=device)  # [D]
        self.A = param(hkv, dtype=dtype, device=device)  # [Hkv]
        self.dt_proj = param(hkv, hkv * d, dtype=dtype, device=device)  # [Hkv, Hkv*D]
        self.dt_bias = param(hkv, dtype=dtype, device=device) if c.attention_bias else None  # [Hkv]
        self.o_proj = param(h, hq * d, dtype=dtype, device=device)  # [H, Hq*D]
        self.o_bias = param(h, dtype=dtype, device=device) if c.o_proj_bias else None  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's keys (with their bias dim) and values into the pool."""
        T, hq, hkv, d = x.shape[0], self.num_heads, self.kv_heads, self.head_dim
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, hq + 2 * hkv, d)  # [T, Hq+2Hkv, D]
        q = rms_norm(qkv[:, :hq], self.q_norm, self.eps)  # [T, Hq, D]
        k = rms_norm(qkv[:, hq:hq + hkv], self.k_norm, self.eps)  # [T, Hkv, D]
        v = qkv[:, hq + hkv:]  # [T, Hkv, D]
        qk = rotary.apply_(torch.cat((q, k), dim=1))  # [T, Hq+Hkv, D]
        dt = self.key_bias(v.reshape(T, hkv * d))  # [T, Hkv]
        q = F.pad(qk[:, :hq], (0, 1), value=1.0)  # [T, Hq, D+1]
        k = torch.cat((qk[:, hq:], (dt * d ** 0.5).unsqueeze(-1)), dim=-1)  # [T, Hkv, D+1]
        o = self.attn_backend.forward(q, k, F.pad(v, (0, 1)), self.layer_id, fb)  # [T, Hq, D+1]
        return linear(o[..., :d].reshape(T, hq * d), self.o_proj, self.o_bias)  # [T, H]

    def key_bias(self, v: torch.Tensor) -> torch.Tensor:
        """Values [T, Hkv*D] -> each key's score bias per KV head [T, Hkv]: exp(A * softplus(dt_proj(v)))."""
        return torch.exp(self.A * F.softplus(linear(v, self.dt_proj, self.dt_bias)))

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this attention's weights under `prefix`."""
        q, kv = self.num_heads * self.head_dim, self.kv_heads * self.head_dim
        t = {prefix + "q_norm.weight": (self.q_norm, False), prefix + "k_norm.weight": (self.k_norm, False),
             prefix + "A": (self.A, False), prefix + "dt_proj.weight": (self.dt_proj, False),
             prefix + "o_proj.weight": (self.o_proj, False)}
        for name, lo, hi in (("q_proj", 0, q), ("k_proj", q, q + kv), ("v_proj", q + kv, q + 2 * kv)):
            t[f"{prefix}{name}.weight"] = (self.qkv_proj[lo:hi], False)
            if self.qkv_bias is not None:
                t[f"{prefix}{name}.bias"] = (self.qkv_bias[lo:hi], False)
        if self.dt_bias is not None:
            t[prefix + "dt_proj.bias"] = (self.dt_bias, False)
        if self.o_bias is not None:
            t[prefix + "o_proj.bias"] = (self.o_bias, False)
        return t


class DogeLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.input_residual = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_residual = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attn = DynamicMaskAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = LlamaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = self.input_residual * x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb)
        return self.post_attention_residual * x + self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps))


class DogeForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with Doge's layers."""

    LAYER_KIND = "dynamic-mask attention"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return DogeLayer(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _weight_targets(self) -> dict:
        t = self._own_attention_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t[p + "input_residual"] = (layer.input_residual, False)
            t[p + "post_attention_residual"] = (layer.post_attention_residual, False)
            if layer.mlp.gate_up_bias is not None:
                t.update(self._mlp_bias_targets(p + "mlp.", layer.mlp))
        return t
