"""Extend attention for CPUs without a Python loop over requests.

A new token i of request b attends to the first prefix_lens[b] + i + 1 keys of its row.  Every short
extend of a batch goes through the native extend kernel in one call: K/V read in place through the
block table, each tile of 16 new tokens of a request scoring every cached key once (a long cached
prefix, the common case of a chat turn or a shared system prompt, is read once per tile, not once per
new token).  Long extends (a prefill chunk of LONG_EXTEND tokens or more) keep torch's SDPA per
request, whose matrix products reuse each key across many queries; a step holds few of them (the
prefill budget caps it), so their loop costs nothing that matters.
"""

import torch

from . import cpu_native, torch_ref

LONG_EXTEND = 256  # measured (bench/README.md): below this the native path wins, above SDPA's GEMMs do


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None):
    """Same contract as torch_ref.extend_attention (q [T, Hq, D] -> out [T, Hq, D])."""
    ext = extend_lens.to(torch.int64)                                   # [B]
    long = ext >= LONG_EXTEND                                           # [B]
    if bool(long.all()):
        return torch_ref.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
                                          ext, sm_scale, out=out)
    if out is None:
        out = torch.empty_like(q)                                       # [T, Hq, D]
    owner = torch.repeat_interleave(torch.arange(ext.numel()), ext)     # [T]
    short_tok = ~long[owner]                                            # [T]
    if bool(short_tok.any()):
        short = (~long).nonzero().view(-1)                              # [Bs]
        out[short_tok] = cpu_native.extend_attention(q[short_tok], k_buffer, v_buffer, req_to_token,
                                                     req_pool_indices[short], prefix_lens[short], ext[short],
                                                     sm_scale).to(out.dtype)  # [Ts, Hq, D]
    if bool(long.any()):
        sel = long.nonzero().view(-1)                                   # [Bl]
        long_tok = ~short_tok                                           # [T]
        out[long_tok] = torch_ref.extend_attention(q[long_tok], k_buffer, v_buffer, req_to_token,
                                                   req_pool_indices[sel], prefix_lens[sel], ext[sel],
                                                   sm_scale).to(out.dtype)  # [Tl, Hq, D]
    return out
