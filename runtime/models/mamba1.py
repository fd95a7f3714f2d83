"""The Mamba-1 mixer (HF MambaMixer; FalconMambaMixer with bc_dt_norm_eps): a selective state-space layer whose memory
of a request is a state [D, N] per layer, kept per request row (recurrent_state.py) instead of in the KV pool.

in_proj gives x and the gate z; x goes through a causal depthwise convolution of width K (with a bias) and SiLU;
x_proj gives dt (R wide), B and C (N each), Falcon Mamba RMS-normalising each of the three without a weight (Jamba:
with one);
dt = softplus(dt_proj(dt) + dt_bias), A = -exp(A_log); the selective scan (selective_scan_rule.py) plus the skip
D * x, times silu(z), is projected back.  Notation: T tokens, H hidden, D channels, N state dims, R dt's rank.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layers import param
from .mamba_stack_config import Mamba1
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates
from .selective_scan_rule import chunked, recurrent_step


class MambaMixer(nn.Module):
    LINEARS = ("in_proj", "x_proj", "dt_proj", "out_proj")   # the weights pack_weights packs

    def __init__(self, m: Mamba1, index: int, states: RecurrentStates, hidden: int, dtype, device):
        """index: this layer's place among the mixers (its slice of `states`)."""
        super().__init__()
        self.m, self.index, self.states = m, index, states
        D, N, R = m.intermediate, m.d_state, m.dt_rank
        self.in_proj = param(2 * D, hidden, dtype=dtype, device=device)  # [2D, H]: x | z
        self.in_bias = param(2 * D, dtype=dtype, device=device) if m.proj_bias else None
        self.conv_weight = param(D, m.conv_kernel, dtype=dtype, device=device)  # [D, K]
        self.conv_bias = param(D, dtype=dtype, device=device) if m.conv_bias else None  # [D]
        self.x_proj = param(R + 2 * N, D, dtype=dtype, device=device)  # [R+2N, D]: dt | B | C
        self.dt_proj = param(D, R, dtype=dtype, device=device)  # [D, R]
        self.dt_bias = param(D, dtype=dtype, device=device)  # [D]
        self.A_log = param(D, N, dtype=dtype, device=device)  # [D, N]
        self.D = param(D, dtype=dtype, device=device)  # [D]
        self.out_proj = param(hidden, D, dtype=dtype, device=device)  # [H, D]
        weighted = m.bc_dt_norm_weighted
        self.dt_norm = param(R, dtype=dtype, device=device) if weighted else None  # [R]
        self.b_norm, self.c_norm = ((param(N, dtype=dtype, device=device) if weighted else None) for _ in "bc")  # [N]
        self.out_bias = param(hidden, dtype=dtype, device=device) if m.proj_bias else None

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's state by its new tokens."""
        m = self.m
        xs, z = linear(x, self.in_proj, self.in_bias).chunk(2, dim=1)  # [T, D] each
        xs = self.states.convolve(self.index, xs, self.conv_weight, self.conv_bias)  # [T, D]
        dt, B, C = linear(xs, self.x_proj).split([m.dt_rank, m.d_state, m.d_state], dim=1)  # [T, R], [T, N] x2
        if m.bc_dt_norm_eps is not None:
            dt, B, C = (self._norm(t, w) for t, w in ((dt, self.dt_norm), (B, self.b_norm), (C, self.c_norm)))
        dt = F.softplus(linear(dt, self.dt_proj).float() + self.dt_bias.float())  # [T, D]
        A = -self.A_log.float().exp()  # [D, N]
        u = xs.float()  # [T, D]
        y = self.states.scan(self.index, lambda u, dt, B, C, state: chunked(u, dt, A, B, C, state),
                             lambda u, dt, B, C, states: recurrent_step(u, dt, A, B, C, states),
                             u, dt, B.float(), C.float())  # [T, D]
        y = (y + self.D.float() * u) * F.silu(z.float())  # [T, D]
        return linear(y.to(x.dtype), self.out_proj, self.out_bias)  # [T, H]

    def _norm(self, t: torch.Tensor, weight) -> torch.Tensor:
        """t [T, n] RMS-normalised in float32, back in its dtype, times weight where Jamba has one."""
        t = F.rms_norm(t.float(), (t.shape[1],), eps=self.m.bc_dt_norm_eps).to(t.dtype)  # [T, n]
        return t * weight if self.m.bc_dt_norm_weighted else t  # [T, n]

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this mixer's weights under `p` ("model.layers.0.mixer.")."""
        t = {p + "in_proj.weight": (self.in_proj, False), p + "conv1d.weight": (ConvWeight(self.conv_weight), False),
             p + "x_proj.weight": (self.x_proj, False), p + "dt_proj.weight": (self.dt_proj, False),
             p + "dt_proj.bias": (self.dt_bias, False), p + "A_log": (self.A_log, False), p + "D": (self.D, False),
             p + "out_proj.weight": (self.out_proj, False)}
        for name, tensor in (("in_proj.bias", self.in_bias), ("conv1d.bias", self.conv_bias),
                             ("out_proj.bias", self.out_bias), ("dt_layernorm.weight", self.dt_norm),
                             ("b_layernorm.weight", self.b_norm), ("c_layernorm.weight", self.c_norm)):
            if tensor is not None:
                t[p + name] = (tensor, False)
        return t


def mamba1_states(m: Mamba1, dtype, device) -> RecurrentStates:
    """The per-row states of a model's Mamba-1 mixers: conv inputs [D, K-1] and [D, N] each."""
    return RecurrentStates(len(m.mamba_layers), m.intermediate, m.conv_kernel, (m.intermediate, m.d_state), dtype,
                           device)
