"""The Mamba-2 mixer (HF BambaMixer, as Granite 4.0 uses it): a selective state-space layer whose memory of a request is
a fixed-size state per head, kept per request row (recurrent_state.py) instead of in the KV pool.

in_proj gives the gate z, the convolved channels x | B | C (a causal depthwise convolution of width K with a bias,
SiLU) and dt per head; dt = softplus(dt + dt_bias) clamped to time_step_limit, A = -exp(A_log); the state-space rule
(ssd_rule.py) plus the skip D * x gives y, then y * silu(z) is RMS-normed per group of heads (gate first; Falcon-H1:
normed then gated, or gated alone: Mamba2.gated_norm) and projected back.  Notation: T tokens, H hidden, Hm heads of P dims, G groups, N state size, I = Hm P, C = I + 2 G N.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layers import param
from .mamba_config import Mamba2
from .packed_linear import linear
from .recurrent_state import RecurrentStates
from .ssd_rule import chunked, recurrent_step


class Mamba2Mixer(nn.Module):
    LINEARS = ("in_proj", "out_proj")   # the weights pack_weights packs

    def __init__(self, m: Mamba2, index: int, states: RecurrentStates, hidden: int, eps: float, dtype, device):
        """index: this layer's place among the mixers (its slice of `states`)."""
        super().__init__()
        self.m, self.index, self.states, self.eps = m, index, states, eps
        I, C, Hm = m.intermediate, m.conv_dim, m.num_heads
        self.in_proj = param(I + C + Hm, hidden, dtype=dtype, device=device)  # [I+C+Hm, H]: z | x B C | dt
        self.in_bias = param(I + C + Hm, dtype=dtype, device=device) if m.proj_bias else None
        self.conv_weight = param(C, m.conv_kernel, dtype=dtype, device=device)  # [C, K]
        self.conv_bias = param(C, dtype=dtype, device=device) if m.conv_bias else None  # [C]
        self.dt_bias = param(Hm, dtype=dtype, device=device)  # [Hm]
        self.A_log = param(Hm, dtype=dtype, device=device)  # [Hm]
        self.D = param(Hm, dtype=dtype, device=device)  # [Hm]
        self.norm = param(I, dtype=dtype, device=device) if m.gated_norm != "none" else None  # [I]
        self.out_proj = param(hidden, I, dtype=dtype, device=device)  # [H, I]
        out_bias = m.proj_bias if m.out_proj_bias is None else m.out_proj_bias
        self.out_bias = param(hidden, dtype=dtype, device=device) if out_bias else None

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's state by its new tokens."""
        m, T = self.m, x.shape[0]
        I, C, Hm, G, N = m.intermediate, m.conv_dim, m.num_heads, m.n_groups, m.d_state
        proj = linear(x, self.in_proj, self.in_bias)  # [T, I+C+Hm]
        z, xbc, dt = proj.split([I, C, Hm], dim=1)
        xbc = self.states.convolve(self.index, xbc, self.conv_weight, self.conv_bias)  # [T, C]
        xs, B, Cm = xbc.split([I, G * N, G * N], dim=1)
        xs = xs.float().view(T, Hm, m.head_dim)  # [T, Hm, P]
        B, Cm = (t.float().view(T, G, N).repeat_interleave(Hm // G, dim=1) for t in (B, Cm))  # [T, Hm, N] each
        dt = F.softplus(dt.float() + self.dt_bias.float()).clamp(m.dt_min, m.dt_max)  # [T, Hm]
        A = -self.A_log.float().exp()  # [Hm]
        y = self.states.scan(self.index, lambda x, dt, B, C, state: chunked(x, dt, A, B, C, state),
                             lambda x, dt, B, C, states: recurrent_step(x, dt, A, B, C, states), xs, dt, B, Cm)
        y = y + self.D.float()[:, None] * xs  # [T, Hm, P] float32
        gate = F.silu(z.float())  # [T, I]
        y = y.reshape(T, I) if m.gated_norm == "norm_first" else y.reshape(T, I) * gate  # [T, I]
        if m.gated_norm != "none":
            y = self.norm.float() * F.rms_norm(y.view(T, G, I // G), (I // G,), eps=self.eps).view(T, I)  # [T, I]
        if m.gated_norm == "norm_first":
            y = y * gate  # [T, I]
        return linear(y.to(x.dtype), self.out_proj, self.out_bias)  # [T, H]


def mamba2_states(m: Mamba2, dtype, device) -> RecurrentStates:
    """The per-row states of a model's Mamba-2 mixers: conv inputs [C, K-1] and [Hm, P, N] each."""
    return RecurrentStates(len(m.mamba_layers), m.conv_dim, m.conv_kernel, (m.num_heads, m.head_dim, m.d_state),
                           dtype, device)
