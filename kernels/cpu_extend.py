"""Extend attention for CPUs: each request to the kernel that suits its shape, without a Python loop over
the small ones.

A new token i of request b attends to the first prefix_lens[b] + i + 1 keys of its row.  Requests
whose work is small (few new tokens, or a short context) go through the native extend kernel in one
call: K/V read in place through the block table, each tile of 16 new tokens scoring every key once.
Requests with matrix-sized work, new tokens x keys >= FLASH_WORK[dtype] (a prefill chunk, or a chat turn's
new tokens on a long cached history), go through torch's CPU flash kernel one by one
(cpu_flash_extend.py: GEMM tiles, AMX for bf16 where the CPU has it); a step holds few of them, so
their loop costs nothing that matters.
"""

import torch

from . import cpu_flash_extend, cpu_native

# new tokens x keys per request from which the flash pair beats the native kernel, by KV dtype (measured on
# an AMX machine, bench/README.md: bf16 GEMMs gain more from AMX than the native kernel's float32 math)
FLASH_WORK = {torch.bfloat16: 24 * 1024, torch.float32: 64 * 1024}


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None):
    """Same contract as torch_ref.extend_attention (q [T, Hq, D] -> out [T, Hq, D])."""
    ext = extend_lens.to(torch.int64)                                   # [B]
    big = ext * (prefix_lens.to(torch.int64) + ext) >= FLASH_WORK.get(k_buffer.dtype, 64 * 1024)  # [B]
    if bool(big.all()):
        return cpu_flash_extend.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices,
                                                 prefix_lens, ext, sm_scale, out=out)
    if not bool(big.any()):   # all small (decodes with drafts, short chunks): one call, no gather or scatter
        res = cpu_native.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, ext,
                                          sm_scale)                                     # [T, Hq, D]
        return res.to(q.dtype) if out is None else out.copy_(res)
    if out is None:
        out = torch.empty_like(q)                                       # [T, Hq, D]
    owner = torch.repeat_interleave(torch.arange(ext.numel()), ext)     # [T]
    small_tok = ~big[owner]                                             # [T]
    if bool(small_tok.any()):
        small = (~big).nonzero().view(-1)                               # [Bs]
        out[small_tok] = cpu_native.extend_attention(q[small_tok], k_buffer, v_buffer, req_to_token,
                                                     req_pool_indices[small], prefix_lens[small], ext[small],
                                                     sm_scale).to(out.dtype)  # [Ts, Hq, D]
    if bool(big.any()):
        sel = big.nonzero().view(-1)                                    # [Bb]
        out[~small_tok] = cpu_flash_extend.extend_attention(q[~small_tok], k_buffer, v_buffer, req_to_token,
                                                            req_pool_indices[sel], prefix_lens[sel], ext[sel],
                                                            sm_scale).to(out.dtype)  # [Tb, Hq, D]
    return out
