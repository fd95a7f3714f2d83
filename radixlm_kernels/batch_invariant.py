"""Batch-invariant extend attention for CPUs (--deterministic): every new token through the native decode
kernel, as its own query with its own causal length.

A decode query's result depends only on its query vector and on the keys and values it attends to
(cpu_decode_attention.c: keys scored and values summed in slot order, with the same bits whether a work item
is one (query, KV head) pair or a whole query, the softmax over exactly `seq_len` scores). So a token's attention is the same bits whether it is computed
by a decode step, in a prefill chunk of any size beside any other requests, or recomputed by an extend
after its request was retracted. The cost: a prefill token reads its whole prefix alone, where the tiled
extend kernel and the flash kernel share each key read among 16 or more new tokens (README: Determinism).
"""

import torch

from . import cpu_native


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None):
    """Same contract as torch_ref.extend_attention (q [T, Hq, D] -> out [T, Hq, D]); token i of request b
    is decoded against the first prefix_lens[b] + i + 1 keys of its row."""
    ext = extend_lens.to(torch.int64)                                            # [B]
    rows = torch.repeat_interleave(req_pool_indices.to(torch.int64), ext)        # [T]
    starts = torch.repeat_interleave(torch.cumsum(ext, 0) - ext, ext)            # [T] first token of each request
    seq_lens = torch.repeat_interleave(prefix_lens.to(torch.int64), ext) + torch.arange(rows.numel()) - starts + 1
    return cpu_native.decode_attention(q, k_buffer, v_buffer, req_to_token, rows, seq_lens, sm_scale, out=out)
