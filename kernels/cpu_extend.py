"""Extend attention for CPUs without a Python loop over requests.

A new token i of request b attends to the first prefix_lens[b] + i + 1 keys of its row: exactly a
decode query with that sequence length.  So every short extend of a batch goes through the native
decode kernel in one call (one query per new token, K/V read in place through the block table).
Long extends (a prefill chunk of LONG_EXTEND tokens or more) keep torch's SDPA per request, whose
matrix products reuse each key across many queries; a step holds few of them (the prefill budget
caps it), so their loop costs nothing that matters.
"""

import torch

from . import cpu_native, torch_ref

LONG_EXTEND = 256  # measured (bench/README.md): below this the native path wins, above SDPA's GEMMs do


def decode_query_lens(prefix_lens: torch.Tensor, extend_lens: torch.Tensor):
    """-> (request index [T], keys seen [T]) for each new token of the batch, in batch order."""
    ext = extend_lens.to(torch.int64)                                   # [B]
    owner = torch.repeat_interleave(torch.arange(ext.numel()), ext)     # [T]
    starts = torch.cumsum(ext, 0) - ext                                 # [B]
    within = torch.arange(owner.numel()) - starts[owner]                # [T]
    return owner, prefix_lens.to(torch.int64)[owner] + within + 1       # [T], [T]


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
    owner, lens = decode_query_lens(prefix_lens, ext)                   # [T], [T]
    short_tok = ~long[owner]                                            # [T]
    if bool(short_tok.any()):
        rows = req_pool_indices.to(torch.int64)[owner[short_tok]]       # [Ts]
        out[short_tok] = cpu_native.decode_attention(q[short_tok], k_buffer, v_buffer, req_to_token, rows,
                                                     lens[short_tok], sm_scale).to(out.dtype)  # [Ts, Hq, D]
    if bool(long.any()):
        sel = long.nonzero().view(-1)                                   # [Bl]
        long_tok = ~short_tok                                           # [T]
        out[long_tok] = torch_ref.extend_attention(q[long_tok], k_buffer, v_buffer, req_to_token,
                                                   req_pool_indices[sel], prefix_lens[sel], ext[sel],
                                                   sm_scale).to(out.dtype)  # [Tl, Hq, D]
    return out
