"""Extend attention for CPUs: each request to the kernel that suits its shape, without a Python loop over
the small ones.

A new token i of request b attends to the first prefix_lens[b] + i + 1 keys of its row.  Requests
whose work is small (few new tokens, or a short context) go through the native extend kernel in one
call: K/V read in place through the block table, each tile of 16 new tokens scoring every key once.
Requests with matrix-sized work, new tokens x keys >= FLASH_WORK[dtype] (a prefill chunk, or a chat turn's
new tokens on a long cached history), go through torch's CPU flash kernel one by one
(cpu_flash_extend.py: GEMM tiles, AMX for bf16 where the CPU has it); a step holds few of them, so
their loop costs nothing that matters.  Where a native packed kernel takes the step's dtype and head dim,
every request of at least PACKED_MIN_EXTEND new tokens goes to it instead, all of them in one call: for
bfloat16 KV on a CPU with AMX the tile-unit kernel (csrc/cpu_amx_extend.c), for float32 KV the FMA kernel
(csrc/cpu_flash_f32.c), for bfloat16 KV without AMX the same plan by AVX512-BF16 pair products (csrc/dp_pairs.h)
where the CPU has them, else the FMA loops on it widened to float32.  On a chunk of four
150-320-token prompts the first two take 2.8x and 2.1x less time than the flash pair (bench/README.md, stop 17); on
a 1,024-token bfloat16 prefill chunk without AMX the third 1.8x (stop 20).
"""

import torch

from . import cpu_flash_extend, cpu_native, cpu_packed

# new tokens x keys per request from which the flash pair beats the native kernel, by KV dtype (measured on
# an AMX machine, bench/README.md: bf16 GEMMs gain more from AMX than the native kernel's float32 math)
FLASH_WORK = {torch.bfloat16: 24 * 1024, torch.float32: 64 * 1024}
# new tokens from which a packed kernel beats the native one, whatever the prefix: on an AMX machine (measured as
# FLASH_WORK), and elsewhere, where the FMA kernel's packing of a long prefix's keys costs more than the native
# kernel's scoring of a few new tokens (a Zen 4, bench/README.md stop 20: even at 64, ahead from 128)
PACKED_MIN_EXTEND = {torch.bfloat16: 8, torch.float32: 16}
FMA_PACKED_MIN_EXTEND = 64
# bfloat16 by the pair products of AVX512-BF16 (a Zen 4, stop 21: 8 requests on 1,507 keys, 32 new tokens each
# 14.4 ms a layer against the native kernel's 17.1, 16 alike)
DP_PACKED_MIN_EXTEND = 32
# the most new tokens a request may have for a step's shared prefix to be attended once (cpu_shared_prefix.py): its
# own keys after it go through the native kernel, slower than a packed one on a long own part
SHARED_MAX_EXTEND = 128


def _matrix_kernel(q, k_buffer):
    """The kernel for matrix-sized extends, and the fewest new tokens that send a request to it (None: judged by
    FLASH_WORK)."""
    D = q.shape[2]
    if q.dtype != k_buffer.dtype or q.dtype not in PACKED_MIN_EXTEND or not cpu_packed.f32_extend_available(D):
        return cpu_flash_extend.extend_attention, None
    if cpu_packed.amx_extend_available(D):
        kernel = cpu_packed.amx_extend_attention if q.dtype == torch.bfloat16 else cpu_packed.f32_extend_attention
        return kernel, PACKED_MIN_EXTEND[q.dtype]
    if q.dtype == torch.bfloat16 and cpu_packed.dp_extend_available(D):
        return cpu_packed.dp_extend_attention, DP_PACKED_MIN_EXTEND
    kernel = cpu_packed.bf16_extend_attention if q.dtype == torch.bfloat16 else cpu_packed.f32_extend_attention
    return kernel, FMA_PACKED_MIN_EXTEND


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None, shared=None):
    """Same contract as torch_ref.extend_attention (q [T, Hq, D] -> out [T, Hq, D]).  shared: the cached keys
    every request holds (cpu_shared_prefix.SharedPrefix.find_for_extend), attended once for all new tokens, each
    request's own keys after them by the native kernel, where no request has more than SHARED_MAX_EXTEND."""
    ext = extend_lens.to(torch.int64)                                   # [B]
    if shared is not None and int(ext.max()) <= SHARED_MAX_EXTEND:
        res = cpu_native.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, ext,
                                          sm_scale, shared=shared)                      # [T, Hq, D]
        return res.to(q.dtype) if out is None else out.copy_(res)
    matrix, min_extend = _matrix_kernel(q, k_buffer)
    if min_extend is not None:
        big = ext >= min_extend                                         # [B]
    else:
        big = ext * (prefix_lens.to(torch.int64) + ext) >= FLASH_WORK.get(k_buffer.dtype, 64 * 1024)  # [B]
    if bool(big.all()):
        return matrix(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, ext, sm_scale, out=out)
    if not bool(big.any()):   # all small (decodes with drafts, short chunks): one call, no gather or scatter
        res = cpu_native.extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, ext,
                                          sm_scale)                                     # [T, Hq, D]
        return res.to(q.dtype) if out is None else out.copy_(res)
    if out is None:
        out = torch.empty_like(q)                                       # [T, Hq, D]
    ext_list, big_list = ext.tolist(), big.tolist()
    starts = cpu_flash_extend.row_starts(ext_list)
    small = [i for i, (e, b) in enumerate(zip(ext_list, big_list)) if e and not b]
    if small:   # their rows gathered by index (not by a [T] mask over every row), attended in one call
        rows = torch.cat([torch.arange(starts[i], starts[i] + ext_list[i]) for i in small])   # [Ts]
        sel = torch.tensor(small)
        res = cpu_native.extend_attention(q.index_select(0, rows), k_buffer, v_buffer, req_to_token,
                                          req_pool_indices[sel], prefix_lens[sel], ext[sel], sm_scale)  # [Ts, Hq, D]
        out.index_copy_(0, rows, res.to(out.dtype))
    big_idx = [i for i, b in enumerate(big_list) if b]
    sel = torch.tensor(big_idx)
    matrix(q, k_buffer, v_buffer, req_to_token, req_pool_indices[sel], prefix_lens[sel], ext[sel], sm_scale, out=out,
           starts=[starts[i] for i in big_idx])  # in place
    return out
