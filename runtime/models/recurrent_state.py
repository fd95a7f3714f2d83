"""Each request row's recurrent state in the layers that remember a request in a fixed size instead of KV (gated
delta nets: gated_delta_net.py; Mamba-2 mixers: mamba2.py; LFM2's short convolutions, whose state_shape (0,) keeps
the convolution inputs alone: lfm2.py), and their causal depthwise convolution over it.

A request's state covers exactly the tokens whose KV the pool holds for it: a request that starts from position 0
starts from zeros, every other one continues its row's state, which a request starting from a cached prefix first
copies from the snapshot the radix cache kept there (copy(); radix_cache/state_snapshots.py).  Its tokens must never
be taken back (runtime/scheduler/hybrid_rules.py).  The tables hold the request rows, then the snapshots.
Notation: L recurrent layers, R request rows, C convolved channels, K the convolution's width, T tokens.
"""

from typing import Optional

import torch
import torch.nn.functional as F

from radixlm.runtime.runner.forward_batch import ForwardBatch


class RecurrentStates:
    """conv [L, R, C, K-1] (the last K - 1 convolution inputs, model dtype) and state [L, R, *state_shape] (float32).
    begin(fb) starts a forward pass: rows at position 0 are zeroed."""

    def __init__(self, layers: int, conv_dim: int, conv_kernel: int, state_shape: tuple, dtype, device):
        self.layers, self.conv_dim, self.conv_kernel, self.state_shape = layers, conv_dim, conv_kernel, state_shape
        self.dtype, self.device = dtype, device
        self.conv: Optional[torch.Tensor] = None
        self.state: Optional[torch.Tensor] = None
        self.rows: list = []          # this pass: (row, first token in [T], new tokens, starts at position 0)
        self.rows_t: Optional[torch.Tensor] = None

    def allocate(self, rows: int) -> None:
        self.conv = torch.zeros(self.layers, rows, self.conv_dim, self.conv_kernel - 1, dtype=self.dtype,
                                device=self.device)
        self.state = torch.zeros(self.layers, rows, *self.state_shape, dtype=torch.float32, device=self.device)

    def bytes_per_row(self) -> int:
        cells = 1
        for n in self.state_shape:
            cells *= n
        return self.layers * (self.conv_dim * (self.conv_kernel - 1) * self.dtype.itemsize + cells * 4)

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
            self.state[:, fresh] = 0

    def copy(self, pairs) -> None:
        """State slot src's conv inputs and state to slot dst, for each (src, dst) of pairs in order."""
        for src, dst in pairs:
            self.conv[:, dst] = self.conv[:, src]
            self.state[:, dst] = self.state[:, src]

    @property
    def decode_only(self) -> bool:
        return all(n == 1 and not fresh for _, _, n, fresh in self.rows)

    def scan(self, layer: int, chunked, step, *inputs: torch.Tensor) -> torch.Tensor:
        """A recurrent rule over each request's new tokens from its row's state: step(*inputs, states [B, ...]) for a
        step of decodes alone (states written back after), else chunked(*request's rows of inputs, state [...]) per
        request (state updated in place).  inputs: [T, ...] each; -> the rule's outputs [T, ...]."""
        state = self.state[layer]  # [R, *state_shape]
        if self.decode_only:
            states = state[self.rows_t]  # [B, *state_shape]
            out = step(*inputs, states)
            state[self.rows_t] = states
            return out
        outs = [chunked(*(t[start:start + n] for t in inputs), state[row]) for row, start, n, _ in self.rows]
        return torch.cat(outs) if outs else inputs[0].new_empty(0)

    def convolve(self, layer: int, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 silu: bool = True) -> torch.Tensor:
        """Causal depthwise convolution (weight [C, K], bias [C] or None), then SiLU (unless `silu` is False: LFM2),
        of each request's new rows of x [T, C] after its row's last K - 1 inputs, which then become the last K - 1
        of these.  -> [T, C].  C may be under conv_dim (Inkling's narrower convolutions): the first C channels."""
        conv = self.conv[layer][:, :x.shape[1]]  # [R, C, K-1]
        if self.decode_only:
            window = torch.cat([conv[self.rows_t], x[:, :, None]], dim=2)  # [B, C, K]
            conv[self.rows_t] = window[:, :, 1:].to(conv.dtype)
            out = (window * weight).sum(-1)  # [B, C]
            out = out if bias is None else out + bias  # [B, C]
            return F.silu(out) if silu else out
        out = torch.empty_like(x)
        for row, start, n, _ in self.rows:
            window = torch.cat([conv[row], x[start:start + n].t()], dim=1)  # [C, K-1+n]
            conv[row] = window[:, n:]
            y = F.conv1d(window[None], weight[:, None, :], bias, groups=window.shape[0])  # [1, C, n]
            out[start:start + n] = y[0].t()
        return F.silu(out) if silu else out  # [T, C]

    def windows(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Each new row of x [T, C]'s last K inputs [T, C, K] (oldest first, itself last), after its request row's last
        K - 1, which then become the last K - 1 of these (Inkling 2's per-token convolution weights)."""
        conv, k = self.conv[layer][:, :x.shape[1]], self.conv_kernel  # [R, C, K-1]
        if self.decode_only:
            window = torch.cat([conv[self.rows_t], x[:, :, None]], dim=2)  # [B, C, K]
            conv[self.rows_t] = window[:, :, 1:].to(conv.dtype)
            return window
        out = x.new_empty(x.shape[0], x.shape[1], k)
        for row, start, n, _ in self.rows:
            window = torch.cat([conv[row], x[start:start + n].t()], dim=1)  # [C, K-1+n]
            conv[row] = window[:, n:]
            out[start:start + n] = window.unfold(1, k, 1).transpose(0, 1)  # [n, C, K]
        return out


class ConvWeight:
    """The load destination of a checkpoint's conv1d.weight [C, 1, K]: the layer's [C, K]."""

    def __init__(self, w: torch.Tensor):
        self.w, self.shape = w, torch.Size((w.shape[0], 1, w.shape[1]))

    def copy_(self, tensor: torch.Tensor) -> None:
        self.w.copy_(tensor[:, 0])
