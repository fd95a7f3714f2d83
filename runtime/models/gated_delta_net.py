"""The gated delta net (Qwen3-Next, Qwen3.5): linear attention whose memory of a request is a fixed-size state, kept
per request row (RecurrentStates) instead of in the KV pool.

A layer projects x to q, k, v (through a causal depthwise convolution of width K over the request's tokens, SiLU),
an output gate z, and per value head beta = sigmoid(b) and the decay g = -exp(A_log) * softplus(a + dt_bias); the
delta rule (gated_delta_rule.py) gives each value head's output, RMS-normed and gated by silu(z).  A request's state
(the last K - 1 convolution inputs and the delta rule's [Hv, Dk, Dv]) covers exactly the tokens whose KV the pool
holds for it: a request that starts from position 0 starts from zeros, every other one continues its row's state, so
its tokens must never be shared through the prefix cache or taken back (the scheduler sees to both: hybrid_rules.py).
Notation: T tokens, H hidden, Hk/Hv key/value heads, Dk/Dv their dims, C = 2 Hk Dk + Hv Dv convolved channels.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gated_delta_rule import chunked, l2_normalized, recurrent_step
from .layers import param
from .linear_attention_config import LinearAttention
from .packed_linear import linear


class RecurrentStates:
    """Every linear layer's state of every request row, float32 for the delta rule: conv [L, R, C, K-1] and
    delta [L, R, Hv, Dk, Dv].  begin(fb) starts a forward pass: rows at position 0 are zeroed."""

    def __init__(self, la: LinearAttention, dtype, device):
        self.la, self.dtype, self.device = la, dtype, device
        self.conv: Optional[torch.Tensor] = None
        self.delta: Optional[torch.Tensor] = None
        self.rows: list = []          # this pass: each request's row, first token in [T], new tokens, whether fresh
        self.rows_t: Optional[torch.Tensor] = None

    def allocate(self, rows: int) -> None:
        la, n = self.la, len(self.la.linear_layers)
        self.conv = torch.zeros(n, rows, la.conv_dim, la.conv_kernel - 1, dtype=self.dtype, device=self.device)
        self.delta = torch.zeros(n, rows, la.num_v_heads, la.head_k_dim, la.head_v_dim, dtype=torch.float32,
                                 device=self.device)

    def bytes_per_row(self) -> int:
        la, n = self.la, len(self.la.linear_layers)
        return n * (la.conv_dim * (la.conv_kernel - 1) * self.dtype.itemsize
                    + la.num_v_heads * la.head_k_dim * la.head_v_dim * 4)

    def begin(self, fb: ForwardBatch) -> None:
        rows = fb.req_pool_indices.tolist()
        if self.conv is None or self.conv.shape[1] <= max(rows, default=0):
            self.allocate(max(fb.req_to_token.shape[0], max(rows, default=0) + 1))
        starts, start = [], 0
        for n in fb.extend_lens_list:
            starts.append(start)
            start += n
        self.rows = list(zip(rows, starts, fb.extend_lens_list, [p == 0 for p in fb.prefix_lens_list]))
        self.rows_t = fb.req_pool_indices
        fresh = [row for row, _, _, new in self.rows if new]
        if fresh:
            self.conv[:, fresh] = 0
            self.delta[:, fresh] = 0

    @property
    def decode_only(self) -> bool:
        return all(n == 1 and not fresh for _, _, n, fresh in self.rows)


class GatedDeltaNet(nn.Module):
    def __init__(self, la: LinearAttention, index: int, states: RecurrentStates, hidden: int, eps: float, dtype, device):
        """index: this layer's place among the linear layers (its slice of `states`)."""
        super().__init__()
        self.la, self.index, self.states, self.eps = la, index, states, eps
        C, V, Hv = la.conv_dim, la.value_dim, la.num_v_heads
        self.in_proj = param(C + V + 2 * Hv, hidden, dtype=dtype, device=device)  # [C+V+2Hv, H]: q k v | z | b | a
        self.conv_weight = param(C, la.conv_kernel, dtype=dtype, device=device)  # [C, K]
        self.dt_bias = param(Hv, dtype=dtype, device=device)  # [Hv]
        self.A_log = param(Hv, dtype=dtype, device=device)  # [Hv]
        self.norm = param(la.head_v_dim, dtype=dtype, device=device)  # [Dv]
        self.out_proj = param(hidden, V, dtype=dtype, device=device)  # [H, Hv*Dv]

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's state by its new tokens."""
        la, T = self.la, x.shape[0]
        C, V, Hv = la.conv_dim, la.value_dim, la.num_v_heads
        proj = linear(x, self.in_proj)  # [T, C+V+2Hv]
        mixed = self._convolve(proj[:, :C])  # [T, C]
        z = proj[:, C:C + V].reshape(T, Hv, la.head_v_dim)  # [T, Hv, Dv]
        b, a = proj[:, C + V:C + V + Hv], proj[:, C + V + Hv:]  # [T, Hv] each
        q, k, v = mixed.split([la.key_dim, la.key_dim, V], dim=1)
        group = Hv // la.num_k_heads
        q, k = (l2_normalized(t.float().view(T, la.num_k_heads, la.head_k_dim)).repeat_interleave(group, dim=1)
                for t in (q, k))  # [T, Hv, Dk] each
        q = q * la.head_k_dim ** -0.5
        v = v.float().view(T, Hv, la.head_v_dim)  # [T, Hv, Dv]
        beta = torch.sigmoid(b.float())  # [T, Hv]
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())  # [T, Hv]
        o = self._delta_rule(q, k, v, g, beta).to(x.dtype)  # [T, Hv, Dv]
        normed = F.rms_norm(o.float(), (la.head_v_dim,), eps=self.eps).to(x.dtype) * self.norm  # [T, Hv, Dv]
        o = (normed.float() * F.silu(z.float())).to(x.dtype)  # [T, Hv, Dv]
        return linear(o.reshape(T, V), self.out_proj)  # [T, H]

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        """Causal depthwise convolution (then SiLU) of each request's new rows of x [T, C] after its state's last
        K - 1 inputs, which then become the last K - 1 of these.  -> [T, C]."""
        s, conv = self.states, self.states.conv[self.index]  # [R, C, K-1]
        if s.decode_only:
            window = torch.cat([conv[s.rows_t], x[:, :, None]], dim=2)  # [B, C, K]
            conv[s.rows_t] = window[:, :, 1:]
            return F.silu((window * self.conv_weight).sum(-1))  # [B, C]
        out = torch.empty_like(x)
        for row, start, n, _ in s.rows:
            window = torch.cat([conv[row], x[start:start + n].t()], dim=1)  # [C, K-1+n]
            conv[row] = window[:, n:]
            y = F.conv1d(window[None], self.conv_weight[:, None, :], groups=window.shape[0])  # [1, C, n]
            out[start:start + n] = y[0].t()
        return F.silu(out)  # [T, C]

    def _delta_rule(self, q, k, v, g, beta) -> torch.Tensor:
        """float32 [T, Hv, *] inputs -> [T, Hv, Dv] outputs, each request from its row's state."""
        s, delta = self.states, self.states.delta[self.index]  # [R, Hv, Dk, Dv]
        if s.decode_only:
            states = delta[s.rows_t]  # [B, Hv, Dk, Dv]
            out = recurrent_step(q, k, v, g, beta, states)
            delta[s.rows_t] = states
            return out
        out = torch.empty_like(v)
        for row, start, n, _ in s.rows:
            state = delta[row]  # a view: updated in place
            end = start + n
            out[start:end] = chunked(q[start:end], k[start:end], v[start:end], g[start:end], beta[start:end], state)
        return out
