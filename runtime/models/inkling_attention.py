"""Inkling's attention (HF InklingAttention; inkling_config.py has the rules): q/k/v and the relative states r from one
projection, K and V through their short convolutions (a request row's state, recurrent_state.py), q and k RMSNormed
per head, the new K/V stored in the pool flat (one head of the pool's width, zeros after this layer's own), then each
request's queries against its keys gathered back from the pool with the learned distance bias, the window and the log
scaling, in float32 by torch (the attention kernels take no per-query bias).
Notation: T tokens, n a request's new tokens, m its keys, Hq/Hkv heads, D head_dim, R d_rel, E the bias extent.
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import rms_norm
from .layers import param
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates


@dataclass(frozen=True)
class Request:
    """One request of a forward pass: its table row, first token in [T], new tokens, cached tokens before them."""

    row: int
    start: int
    new: int
    prefix: int


def requests_of(fb: ForwardBatch) -> list:
    starts, start = [], 0
    for n in fb.extend_lens_list:
        starts.append(start)
        start += n
    return [Request(*r) for r in zip(fb.req_pool_indices.tolist(), starts, fb.extend_lens_list, fb.prefix_lens_list)]


def short_conv(states: RecurrentStates, index: int, x: torch.Tensor, weight: torch.Tensor,
               divisor: float = 1.0) -> torch.Tensor:
    """HF InklingShortConvolution: x + causal depthwise conv(x) (weight [C, K], no bias, no activation) in float32,
    over each request's last K - 1 inputs, divided by divisor (Inkling 2's sqrt(K + 1)); x [T, C] -> [T, C] in x's
    dtype."""
    xf = x.float()
    return ((xf + states.convolve(index, xf, weight, None, silu=False)) / divisor).to(x.dtype)


def distance_bias(r: torch.Tensor, profiles: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """r [n, Hq, R] mixes profiles [R, E] into a bias per distance; distance [n, m] -> [Hq, n, m], zero outside
    0 <= distance < E."""
    extent = profiles.shape[1]
    bias = (r @ profiles).transpose(0, 1)  # [Hq, n, E]
    index = distance.clamp(0, extent - 1).expand(bias.shape[0], -1, -1)  # [Hq, n, m]
    return bias.gather(-1, index).masked_fill((distance < 0) | (distance >= extent), 0.0)


def out_of_reach(distance: torch.Tensor, window: Optional[int]) -> torch.Tensor:
    """The keys a query does not see: later ones, and those a window (None: none) or more back; distance [n, m]."""
    return (distance < 0) if window is None else (distance < 0) | (distance >= window)


def log_scale(positions: torch.Tensor, floor: Optional[int], alpha: float) -> Optional[torch.Tensor]:
    """Each query's 1 + alpha * log(max((position + 1) / floor, 1)) [n] float32; None without a floor."""
    if floor is None:
        return None
    return 1.0 + alpha * torch.log(((positions + 1).float() / floor).clamp(min=1.0))


class PoolAttention(nn.Module):
    """The attention both Inkling generations share: this layer's head shapes (inkling_config.py), its flat K/V in the
    pool, and each request's queries over them with the learned distance bias, in float32."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, scale: float, log_scaled_scores: bool):
        """scale: the scores' (1/D or D ** -0.5); log_scaled_scores: the full layers' scores log-scaled here (else
        the caller scales queries and relative states)."""
        super().__init__()
        ink = c.inkling
        self.layer_id, self.attn_backend, self.eps = layer_id, attn_backend, c.rms_norm_eps
        self.num_heads, self.num_kv_heads, self.head_dim = ink.shape(layer_id)
        self.sliding = layer_id in ink.sliding_layers
        self.window = ink.window if self.sliding else None
        self.extent = ink.window if self.sliding else ink.rel_extent
        self.scale = scale
        self.log_floor, self.log_alpha = ((ink.log_floor, ink.log_alpha) if log_scaled_scores and not self.sliding
                                          else (None, 0.0))
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.r_size, self.pool_width = self.num_heads * ink.d_rel, c.head_dim

    def store(self, k: torch.Tensor, v: torch.Tensor, fb: ForwardBatch, slot: int) -> None:
        """k, v [T, Hkv*D] into pool layer `slot`'s slots (this layer's, or a loop pass's), flat, zeros after them."""
        pad = self.pool_width - self.kv_size
        self.attn_backend.store_kv(slot, fb.out_cache_loc, F.pad(k, (0, pad))[:, None], F.pad(v, (0, pad))[:, None])

    def attend_all(self, q: torch.Tensor, r: torch.Tensor, profiles: torch.Tensor, reqs: list, fb: ForwardBatch,
                   slot: int, sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """q [T, Hq, D], relative states r [T, Hq, R], profiles [R, E], sinks [T, Hq] or None, over pool layer
        `slot` -> [T, Hq, D]."""
        if not reqs:
            return q.new_empty(0, self.num_heads, self.head_dim)
        profiles, r = profiles.float(), r.float()
        return torch.cat([self.attend(q[s:s + n], r[s:s + n], profiles, req, fb, slot,
                                      None if sinks is None else sinks[s:s + n])
                          for req in reqs for s, n in ((req.start, req.new),)])

    def attend(self, q: torch.Tensor, r: torch.Tensor, profiles: torch.Tensor, req: Request, fb: ForwardBatch,
               slot: int, sinks: Optional[torch.Tensor]) -> torch.Tensor:
        """One request's new queries q [n, Hq, D] over its keys in pool layer `slot` -> [n, Hq, D] in q's dtype; a
        sink is one more logit per query and head, of no value."""
        pool, device = self.attn_backend.kv_pool, q.device
        end = req.prefix + req.new
        first = 0 if self.window is None else max(0, req.prefix - self.window + 1)   # older keys are out of reach
        slots = fb.req_to_token[req.row, first:end].long()  # [m]
        k = pool.k_buffers[slot][slots, 0, :self.kv_size].float().reshape(-1, self.num_kv_heads, self.head_dim)
        v = pool.v_buffers[slot][slots, 0, :self.kv_size].float().reshape(-1, self.num_kv_heads, self.head_dim)
        groups = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [m, Hq, D] each
        q_pos = torch.arange(req.prefix, end, device=device)  # [n]
        distance = q_pos[:, None] - torch.arange(first, end, device=device)[None, :]  # [n, m]
        scores = torch.einsum("nhd,mhd->hnm", q.float(), k) * self.scale  # [Hq, n, m]
        scores = scores + distance_bias(r, profiles, distance)
        tau = log_scale(q_pos, self.log_floor, self.log_alpha)
        if tau is not None:
            scores = scores * tau[None, :, None]
        scores = scores.masked_fill(out_of_reach(distance, self.window), -math.inf)
        if sinks is not None:
            scores = torch.cat([scores, sinks.float().t()[:, :, None]], dim=-1)  # [Hq, n, m+1]
        probs = torch.softmax(scores, dim=-1)[..., :k.shape[0]]  # [Hq, n, m]
        return torch.einsum("hnm,mhd->nhd", probs, v).to(q.dtype)  # [n, Hq, D]


class InklingAttention(PoolAttention):
    LINEARS = ("qkvr_proj", "o_proj")   # the weights pack_weights packs

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, states: RecurrentStates, dtype, device):
        ink = c.inkling
        super().__init__(c, layer_id, attn_backend, 1.0 / ink.shape(layer_id)[2], log_scaled_scores=True)
        self.states = states
        rows = self.q_size + 2 * self.kv_size + self.r_size
        self.qkvr_proj = param(rows, c.hidden_size, dtype=dtype, device=device)  # [Hq*D + 2*Hkv*D + Hq*R, H]
        self.o_proj = param(c.hidden_size, self.q_size, dtype=dtype, device=device)  # [H, Hq*D]
        self.q_norm = param(self.head_dim, dtype=dtype, device=device)  # [D]
        self.k_norm = param(self.head_dim, dtype=dtype, device=device)  # [D]
        self.rel_proj = param(ink.d_rel, self.extent, dtype=dtype, device=device)  # [R, E]
        self.kv_conv = param(2 * self.kv_size, ink.conv_kernel, dtype=torch.float32, device=device)  # [2*Hkv*D, K]
        self.conv_index = 3 * layer_id   # K|V; the layer's attention and MLP outputs are 3i+1 and 3i+2

    def forward(self, x: torch.Tensor, reqs: list, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        q, kv, r = linear(x, self.qkvr_proj).split((self.q_size, 2 * self.kv_size, self.r_size), dim=1)
        kv = short_conv(self.states, self.conv_index, kv, self.kv_conv)  # [T, 2*Hkv*D]
        q = rms_norm(q.reshape(T, hq, d), self.q_norm, self.eps)  # [T, Hq, D]
        k = rms_norm(kv[:, :self.kv_size].reshape(T, hkv, d), self.k_norm, self.eps).reshape(T, -1)  # [T, Hkv*D]
        self.store(k, kv[:, self.kv_size:], fb, self.layer_id)
        out = self.attend_all(q, r.reshape(T, hq, -1), self.rel_proj, reqs, fb, self.layer_id)  # [T, Hq, D]
        return linear(out.reshape(T, self.q_size), self.o_proj)  # [T, H]

    def checkpoint_targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast) under p ("model.layers.{i}.self_attn.")."""
        q, kv = self.q_size, self.kv_size
        w = self.qkvr_proj
        return {p + "q_proj.weight": (w[:q], False), p + "k_proj.weight": (w[q:q + kv], False),
                p + "v_proj.weight": (w[q + kv:q + 2 * kv], False), p + "r_proj.weight": (w[q + 2 * kv:], False),
                p + "o_proj.weight": (self.o_proj, False), p + "q_norm.weight": (self.q_norm, False),
                p + "k_norm.weight": (self.k_norm, False), p + "rel_logits_proj.proj": (self.rel_proj, False),
                p + "k_sconv.conv1d.weight": (ConvWeight(self.kv_conv[:kv]), False),
                p + "v_sconv.conv1d.weight": (ConvWeight(self.kv_conv[kv:]), False)}

