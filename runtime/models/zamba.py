"""Zyphra Zamba v1 (HF ZambaForCausalLM; fields: zamba_config.py): Zamba2's layout (zamba2.py) over Mamba-1 mixers
split into heads.  Every layer is x + mixer(norm(x + a)), where a hybrid layer's a is the one shared block's output
(Zamba2Block without adapters or rotary: attention over rmsnorm([x | embeddings]), then a gated MLP) through the
layer's `linear`, 0 elsewhere.  The mixer (ZambaMixer) is Mamba's (mamba1.py) with in_proj's outputs interleaving x
and the gate channel by channel, and G heads of D / G channels, each with its own x_proj, dt_proj, A_log and D.
Checkpoint names: layers.{i}.{input_layernorm, mamba.*} and layers.{i}.{linear, mamba_decoder.{input_layernorm,
mamba.*}, shared_transf.*} (the block, under every hybrid layer or only the first), model.final_layernorm.
No tensor parallelism, no native one-call decode, no FP8.
Notation: T tokens, H hidden, D channels in G heads of E, N state dims, R dt's rank, K the convolution's width.
"""

import re

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layers import param
from .mamba1 import mamba1_states
from .mamba_stack_config import Mamba1
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates
from .selective_scan_rule import chunked, recurrent_step
from .zamba2 import Zamba2Block, Zamba2ForCausalLM, Zamba2Layer


class ZambaMixer(nn.Module):
    LINEARS = ("in_proj", "out_proj")

    def __init__(self, m: Mamba1, index: int, states: RecurrentStates, hidden: int, dtype, device):
        super().__init__()
        self.m, self.index, self.states = m, index, states
        D, N, R, G = m.intermediate, m.d_state, m.dt_rank, m.heads
        E = D // G
        self.in_proj = param(2 * D, hidden, dtype=dtype, device=device)  # [2D, H]: x and z interleaved
        self.in_bias = param(2 * D, dtype=dtype, device=device) if m.proj_bias else None
        self.conv_weight = param(D, m.conv_kernel, dtype=dtype, device=device)  # [D, K]
        self.conv_bias = param(D, dtype=dtype, device=device) if m.conv_bias else None  # [D]
        self.x_proj = param(G, R + 2 * N, E, dtype=dtype, device=device)  # [G, R+2N, E]: dt | B | C
        self.dt_proj = param(G, E, R, dtype=dtype, device=device)  # [G, E, R]
        self.dt_bias = param(G, E, dtype=dtype, device=device)  # [G, E]
        self.A_log = param(G, E, N, dtype=dtype, device=device)  # [G, E, N]
        self.D = param(G, E, dtype=dtype, device=device)  # [G, E]
        self.out_proj = param(hidden, D, dtype=dtype, device=device)  # [H, D]
        self.out_bias = param(hidden, dtype=dtype, device=device) if m.proj_bias else None

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's state by its new tokens."""
        m, T = self.m, x.shape[0]
        G, R, N = m.heads, m.dt_rank, m.d_state
        xz = linear(x, self.in_proj, self.in_bias).view(T, -1, 2)  # [T, D, 2]
        xs = self.states.convolve(self.index, xz[:, :, 0].contiguous(), self.conv_weight, self.conv_bias)  # [T, D]
        heads = xs.view(T, G, -1)  # [T, G, E]
        dt, B, C = torch.einsum("gpe,tge->tgp", self.x_proj, heads).split([R, N, N], dim=2)  # [T, G, R], [T, G, N]
        dt = torch.einsum("ger,tgr->tge", self.dt_proj, dt)  # [T, G, E]
        dt = F.softplus(dt.float() + self.dt_bias.float()).reshape(T, -1)  # [T, D]
        A = -self.A_log.float().exp()  # [G, E, N]
        u = xs.float()  # [T, D]
        y = self.states.scan(self.index, lambda u, dt, B, C, state: self._per_head(chunked, u, dt, A, B, C, state),
                             lambda u, dt, B, C, states: self._per_head(recurrent_step, u, dt, A, B, C, states),
                             u, dt, B.float(), C.float())  # [T, D]
        y = (y + self.D.float().reshape(-1) * u) * F.silu(xz[:, :, 1].float())  # [T, D]
        return linear(y.to(x.dtype), self.out_proj, self.out_bias)  # [T, H]

    def _per_head(self, rule, u, dt, A, B, C, state) -> torch.Tensor:
        """rule (chunked or recurrent_step) over each head's channels: u, dt [n, D]; B, C [n, G, N]; state [..., D, N]
        (a request's [D, N] or the decodes' [n, D, N]) updated in place head by head.  -> [n, D]."""
        E = self.m.intermediate // self.m.heads
        return torch.cat([rule(u[:, g * E:(g + 1) * E], dt[:, g * E:(g + 1) * E], A[g], B[:, g], C[:, g],
                               state[..., g * E:(g + 1) * E, :]) for g in range(self.m.heads)], dim=1)

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this mixer's weights under `p` ("model.layers.0.mamba.")."""
        t = {p + "in_proj.weight": (self.in_proj, False), p + "conv1d.weight": (ConvWeight(self.conv_weight), False),
             p + "x_proj_weight": (self.x_proj, False), p + "dt_proj_weight": (self.dt_proj, False),
             p + "dt_proj_bias": (self.dt_bias, False), p + "A_log": (self.A_log, False), p + "D": (self.D, False),
             p + "out_proj.weight": (self.out_proj, False)}
        for name, tensor in (("in_proj.bias", self.in_bias), ("conv1d.bias", self.conv_bias),
                             ("out_proj.bias", self.out_bias)):
            if tensor is not None:
                t[p + name] = (tensor, False)
        return t


class ZambaBlock(Zamba2Block):
    """Zamba2Block under Zamba's names: the MLP's gate_proj and up_proj apart."""

    def targets(self, p: str) -> dict:
        t = super().targets(p)
        del t[p + "feed_forward.gate_up_proj.weight"]
        I = self.c.intermediate_size
        t[p + "feed_forward.gate_proj.weight"] = (self.gate_up_proj[:I], False)
        t[p + "feed_forward.up_proj.weight"] = (self.gate_up_proj[I:], False)
        return t


class ZambaForCausalLM(Zamba2ForCausalLM):
    LAYER_KIND = "hybrid (Mamba)"
    TP_REASON = " (its Mamba mixers run on one rank)"

    def make_states(self, config, dtype, device) -> RecurrentStates:
        return mamba1_states(config.mamba1, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, sb = self.config, self.config.shared_blocks
        if not hasattr(self, "blocks"):
            self.blocks = nn.ModuleList([ZambaBlock(c, (), attn_backend, dtype, device)] if sb.hybrid_layers else [])
        mixer = ZambaMixer(c.mamba1, layer_id, self.states, c.hidden_size, dtype, device)
        if layer_id not in sb.hybrid_layers:
            return Zamba2Layer(c, mixer, None, None, dtype, device)
        return Zamba2Layer(c, mixer, self.blocks[0], sb.hybrid_layers.index(layer_id), dtype, device)

    def mixer_targets(self, p: str, mixer: nn.Module) -> dict:
        return mixer.targets(p)

    def _our_name(self, name: str) -> str:
        """model.final_layernorm -> model.norm; layers.{i}.shared_transf. -> blocks.0."""
        if name == "model.final_layernorm.weight":
            return "model.norm.weight"
        found = re.match(r"model\.layers\.\d+\.shared_transf\.", name)
        return name if found is None else "model.blocks.0." + name[found.end():]
