"""Sliding-window attention and attention sinks on CPUs through the native kernels; soft-capping through the torch
reference.

The native decode kernel (csrc/cpu_decode_attention.c) attends a query to the first seq_len keys of a block-table
row.  A window of W keys is passed to it as a gathered table: row i holds the slots of query i's last
min(seq_len_i, W) positions, so the kernel reads exactly the window (nothing before it) and runs unchanged.  An
extend of a few new tokens on a windowed layer runs each as such a decode query (as --deterministic runs every
extend, batch_invariant.py): the window differs per token.  Longer extends run the torch reference (torch's SDPA
with the window mask over the keys any new token sees), faster there because it reads each key once for all new
tokens (bench/window_attention.py, Gemma 2's shape on a loaded Zen 4: per-token 1.2x faster at 4 new tokens,
0.8-1.2x at 16, the reference 1.2-1.3x faster at 128; the limit sits below that noisy crossover).  Where no query's context is longer than the window, the window changes nothing and the
ordinary kernels run.
The native kernels have no soft-capping: a soft-capped layer (Gemma 2) runs the torch reference, on every path.
Sinks (gpt-oss) go to the native kernels as their prior (cpu_native._sink_prior: no keys, log-sum-exp = the sink);
an extend with sinks and an unbinding window runs the native extend kernel for every request (the packed and flash
kernels take no sinks), a long one with a binding window the torch reference.
"""

import torch

from . import cpu_extend, cpu_native, torch_ref

PER_TOKEN_MAX_EXTEND = 8  # new tokens per request up to which a windowed extend runs one decode query per token


def window_table(req_to_token, req_pool_indices, seq_lens, window):
    """-> (table [N, min(W, max len)] int32, rows [N] = 0..N-1, lens [N]): query i's last min(seq_lens[i], W)
    slots, first to last."""
    seq = seq_lens.to(torch.int64)                                              # [N]
    lens = seq.clamp(max=window)                                                # [N]
    width = max(1, int(lens.max()))
    cols = (seq - lens)[:, None] + torch.arange(width)[None, :]                 # [N, Wm] positions
    flat = req_pool_indices.to(torch.int64)[:, None] * req_to_token.stride(0) + cols.clamp(max=req_to_token.shape[1] - 1)
    # one index_select over the flat table: torch's 2-D advanced indexing is ~500x slower at this size
    table = req_to_token.reshape(-1).index_select(0, flat.view(-1)).view(flat.shape)  # [N, Wm]
    return table, torch.arange(seq.numel(), dtype=torch.int64), lens


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale, out=None,
                     window=None, softcap=None, sinks=None):
    """torch_ref.decode_attention's contract with window/softcap/sinks: native over the gathered window, torch
    reference under soft-capping."""
    if softcap:
        return torch_ref.decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale,
                                          out=out, window=window, softcap=softcap, sinks=sinks)
    if window and int(seq_lens.max()) > window:
        req_to_token, req_pool_indices, seq_lens = window_table(req_to_token, req_pool_indices, seq_lens, window)
    return cpu_native.decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale,
                                       out=out, sinks=sinks)


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                     out=None, window=None, softcap=None, per_token=False, sinks=None):
    """torch_ref.extend_attention's contract with window/softcap/sinks: a binding window by one decode query per
    new token (up to PER_TOKEN_MAX_EXTEND new tokens, else the torch reference), an unbinding one by cpu_extend
    (with sinks: the native extend kernel), soft-capping by the torch reference.  per_token: always one decode
    query per new token (--deterministic: batch-invariant)."""
    if softcap:
        return torch_ref.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
                                          extend_lens, sm_scale, out=out, window=window, softcap=softcap, sinks=sinks)
    ext = extend_lens.to(torch.int64)                                           # [B]
    if not per_token and (not window or int((prefix_lens.to(torch.int64) + ext).max()) <= window):
        if sinks is not None:
            return cpu_native.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
                                               ext, sm_scale, out=out, sinks=sinks)
        return cpu_extend.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens,
                                           ext, sm_scale, out=out)
    if not per_token and int(ext.max()) > PER_TOKEN_MAX_EXTEND:
        return torch_ref.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, ext,
                                          sm_scale, out=out, window=window, sinks=sinks)
    rows = torch.repeat_interleave(req_pool_indices.to(torch.int64), ext)      # [T]
    starts = torch.repeat_interleave(torch.cumsum(ext, 0) - ext, ext)           # [T] first row of each request
    seq = torch.repeat_interleave(prefix_lens.to(torch.int64), ext) + torch.arange(rows.numel()) - starts + 1  # [T]
    return decode_attention(q, k_buffer, v_buffer, req_to_token, rows, seq, sm_scale, out=out, window=window,
                            sinks=sinks)
