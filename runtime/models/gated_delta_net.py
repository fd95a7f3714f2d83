"""The gated delta net (Qwen3-Next, Qwen3.5): linear attention whose memory of a request is a fixed-size state, kept
per request row (RecurrentStates) instead of in the KV pool.

A layer projects x to q, k, v (through a causal depthwise convolution of width K over the request's tokens, SiLU),
an output gate z, and per value head beta = sigmoid(b) (OLMo Hybrid: twice it) and the decay
g = -exp(A_log) * softplus(a + dt_bias); the delta rule (gated_delta_rule.py) gives each value head's output,
RMS-normed and gated by silu(z).  A request's state (the last K - 1 convolution inputs and the delta rule's
[Hv, Dk, Dv]) covers exactly the tokens whose KV the pool holds for it: a request that starts from position 0
starts from zeros, every other one continues its row's state, so its tokens must never be shared through the prefix
cache or taken back (recurrent_state.py).
Notation: T tokens, H hidden, Hk/Hv key/value heads, Dk/Dv their dims, C = 2 Hk Dk + Hv Dv convolved channels.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gated_delta_rule import chunked, l2_normalized, recurrent_step
from .layers import param
from .linear_attention_config import LinearAttention
from .packed_linear import linear
from .recurrent_state import RecurrentStates


def delta_net_states(la: LinearAttention, dtype, device) -> RecurrentStates:
    """The per-row states of a model's gated delta nets: conv inputs [C, K-1] and [Hv, Dk, Dv] each."""
    return RecurrentStates(len(la.linear_layers), la.conv_dim, la.conv_kernel,
                           (la.num_v_heads, la.head_k_dim, la.head_v_dim), dtype, device)


class GatedDeltaNet(nn.Module):
    LINEARS = ("in_proj", "out_proj")   # the weights pack_weights packs

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
        mixed = self.states.convolve(self.index, proj[:, :C], self.conv_weight, None)  # [T, C]
        z = proj[:, C:C + V].reshape(T, Hv, la.head_v_dim)  # [T, Hv, Dv]
        b, a = proj[:, C + V:C + V + Hv], proj[:, C + V + Hv:]  # [T, Hv] each
        q, k, v = mixed.split([la.key_dim, la.key_dim, V], dim=1)
        group = Hv // la.num_k_heads
        q, k = (l2_normalized(t.float().view(T, la.num_k_heads, la.head_k_dim)).repeat_interleave(group, dim=1)
                for t in (q, k))  # [T, Hv, Dk] each
        q = q * la.head_k_dim ** -0.5
        v = v.float().view(T, Hv, la.head_v_dim)  # [T, Hv, Dv]
        beta = torch.sigmoid(b.float()) * la.beta_scale  # [T, Hv]
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())  # [T, Hv]
        o = self.states.scan(self.index, chunked, recurrent_step, q, k, v, g, beta).to(x.dtype)  # [T, Hv, Dv]
        eps = self.eps if la.norm_eps is None else la.norm_eps
        normed = F.rms_norm(o.float(), (la.head_v_dim,), eps=eps).to(x.dtype) * self.norm  # [T, Hv, Dv]
        o = (normed.float() * F.silu(z.float())).to(x.dtype)  # [T, Hv, Dv]
        return linear(o.reshape(T, V), self.out_proj)  # [T, H]
