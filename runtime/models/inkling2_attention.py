"""Inkling 2's attention (HF Inkling2SlidingAttention, Inkling2FullAttention) on PoolAttention (inkling_attention.py):
queries times a learned per-head scale and L2-clipped, keys L2-clipped and values RMSNormed (no weight) after their
short convolutions ((x + conv(x)) / sqrt(K + 1)), relative states scaled and clipped the same way, scores over
sqrt(head_dim) plus the distance bias, a sink logit per query and head (sink_proj), the output gated by the sigmoid of
gate_proj before o_proj.  The full layers read q, k and v from their own inputs, log-scale the queries and relative
states, and convolve K and V with per-token taps: static_weight plus weight_proj of the K (or V) input, one set per KV
head, over (x + taps . window) / sqrt(2K + 1).
Notation: T tokens, H hidden, Hq/Hkv heads, D head_dim, R d_rel, K the convolution's width.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .inkling_attention import PoolAttention, log_scale, short_conv
from .layers import param
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates


def l2_clip(x: torch.Tensor, threshold: float, scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """HF Inkling2(Scaled)L2Clip: x [..., heads, d] (times scale [heads, d]) scaled down to L2 norm `threshold`
    per head where longer, in float32 -> x's dtype."""
    xf = x.float() if scale is None else x.float() * scale.float()
    norm = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    return (xf * (threshold / (norm + 1e-6)).clamp(max=1.0)).to(x.dtype)


def unit_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Inkling2UnweightedRMSNorm over the last dim, in float32 -> x's dtype."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


class Inkling2Attention(PoolAttention):
    """Either kind of layer; forward(q_in, k_in, v_in, ...) gets the sliding layers' one input three times."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states: RecurrentStates, dtype, device):
        ink, h = c.inkling, c.hidden_size
        super().__init__(c, layer_id, attn_backend, ink.shape(layer_id)[2] ** -0.5, log_scaled_scores=False)
        self.states, self.kernel, self.qk_clip, self.rel_clip = states, ink.conv_kernel, ink.qk_clip, ink.rel_clip
        self.tau = (None, 0.0) if self.sliding else (ink.log_floor, ink.log_alpha)
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        new = lambda *shape, dt=dtype: param(*shape, dtype=dt, device=device)  # noqa: E731
        self.q_proj, self.k_proj, self.v_proj = new(self.q_size, h), new(self.kv_size, h), new(self.kv_size, h)
        self.r_proj, self.sink_proj, self.gate_proj = new(self.r_size, h), new(hq, h), new(self.q_size, h)
        self.o_proj = new(h, self.q_size)  # [H, Hq*D]
        self.q_scale, self.r_scale = new(hq, d, dt=torch.float32), new(hq, ink.d_rel, dt=torch.float32)
        self.rel_proj = new(ink.d_rel, self.extent)  # [R, E]
        if self.sliding:   # K|V's static convolution [2*Hkv*D, K]
            self.kv_conv = new(2 * self.kv_size, self.kernel, dt=torch.float32)
        else:   # per K and V: static taps [K, Hkv*D] (tap 0 the current token) and their per-token part [Hkv*K, H]
            self.k_taps, self.v_taps = (new(self.kernel, self.kv_size, dt=torch.float32) for _ in range(2))
            self.k_tap_proj, self.v_tap_proj = new(hkv * self.kernel, h), new(hkv * self.kernel, h)
        self.LINEARS = ("q_proj", "k_proj", "v_proj", "r_proj", "sink_proj", "gate_proj", "o_proj")

    def forward(self, q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, reqs: list, fb: ForwardBatch,
                slot: int) -> torch.Tensor:
        """q_in, k_in, v_in: [T, H] (normed) -> [T, H].  Writes K/V into pool layer `slot` (the layer's own, or its
        loop pass's) and advances its convolution states 3 * slot."""
        T, hq, hkv, d = q_in.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        tau = log_scale(fb.positions, *self.tau)  # [T] or None
        q = self._log_scaled(l2_clip(linear(q_in, self.q_proj).view(T, hq, d), self.qk_clip, self.q_scale), tau)
        r = linear(q_in, self.r_proj).view(T, hq, -1)
        r = self._log_scaled(l2_clip(r, self.rel_clip, self.r_scale), tau)  # [T, Hq, R]
        k, v = self._convolved_kv(linear(k_in, self.k_proj), linear(v_in, self.v_proj), k_in, v_in, 3 * slot)
        k = l2_clip(k.view(T, hkv, d), self.qk_clip).reshape(T, -1)  # [T, Hkv*D]
        self.store(k, unit_rms(v.view(T, hkv, d), self.eps).reshape(T, -1), fb, slot)
        out = self.attend_all(q, r, self.rel_proj, reqs, fb, slot, sinks=linear(q_in, self.sink_proj))  # [T, Hq, D]
        return linear(self.gated(out.reshape(T, -1), q_in), self.o_proj)  # [T, H]

    def gated(self, out: torch.Tensor, q_in: torch.Tensor) -> torch.Tensor:
        """The attention's output [T, Hq*D] times sigmoid(gate_proj(q_in)), in float32."""
        return (out.float() * torch.sigmoid(linear(q_in, self.gate_proj).float())).to(q_in.dtype)

    @staticmethod
    def _log_scaled(x: torch.Tensor, tau: Optional[torch.Tensor]) -> torch.Tensor:
        return x if tau is None else (x.float() * tau[:, None, None]).to(x.dtype)

    def _convolved_kv(self, k: torch.Tensor, v: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, index: int):
        """k, v [T, Hkv*D] through their short convolutions -> (k, v) [T, Hkv*D] each."""
        kv = torch.cat([k, v], dim=1)  # [T, 2*Hkv*D]
        if self.sliding:
            kv = short_conv(self.states, index, kv, self.kv_conv, math.sqrt(self.kernel + 1))
            return kv.split(self.kv_size, dim=1)
        T, hkv, K = kv.shape[0], self.num_kv_heads, self.kernel
        windows = self.states.windows(index, kv.float()).flip(-1)  # [T, 2*Hkv*D, K]: [..., lag]
        out = []
        for i, (x_in, taps, tap_proj) in enumerate(((k_in, self.k_taps, self.k_tap_proj),
                                                    (v_in, self.v_taps, self.v_tap_proj))):
            weights = self.tap_weights(x_in, taps, tap_proj)  # [T, Hkv, D, K]
            part = windows[:, i * self.kv_size:(i + 1) * self.kv_size].reshape(T, hkv, -1, K)  # [T, Hkv, D, K]
            y = (part * weights).sum(-1).reshape(T, -1) + part[..., 0].reshape(T, -1)  # [T, Hkv*D]
            out.append((y / math.sqrt(2 * K + 1)).to(k.dtype))
        return out

    def tap_weights(self, x_in: torch.Tensor, taps: torch.Tensor, tap_proj: torch.Tensor) -> torch.Tensor:
        """Each token's taps [T, Hkv, D, K] (by lag): the static ones [K, Hkv*D] plus tap_proj(x_in) per KV head."""
        T, hkv, K = x_in.shape[0], self.num_kv_heads, self.kernel
        return taps.float().t().reshape(hkv, -1, K) + linear(x_in, tap_proj).float().view(T, hkv, 1, K)

    def checkpoint_targets(self, p: str) -> dict:
        """Checkpoint name -> (destination, broadcast) under p ("model.llm.layers.{i}.attn."), the names HF saves."""
        t = {p + "wq_du.weight": (self.q_proj, False), p + "q_l2_clip.scale": (self.q_scale, False),
             p + "wk_dv.weight": (self.k_proj, False), p + "wv_dv.weight": (self.v_proj, False),
             p + "gate_attn.weight": (self.gate_proj, False), p + "wo_ud.weight": (self.o_proj, False),
             p + "attn_sink_proj.weight": (self.sink_proj, False), p + "rel_logits_proj.proj": (self.rel_proj, False),
             p + "wr_du.weight": (self.r_proj, False), p + "rel_l2_clip.scale": (self.r_scale, False)}
        if self.sliding:
            kv = self.kv_size
            t.update({p + "k_sconv.weight": (ConvWeight(self.kv_conv[:kv]), False),
                      p + "v_sconv.weight": (ConvWeight(self.kv_conv[kv:]), False)})
        else:
            t.update({p + "k_sconv.static_w": (self.k_taps, False), p + "k_sconv.weight_proj": (self.k_tap_proj, False),
                      p + "v_sconv.static_w": (self.v_taps, False),
                      p + "v_sconv.weight_proj": (self.v_tap_proj, False)})
        return t
