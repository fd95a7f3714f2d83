"""Native CPU kernels that read a copy packed for their products (C sources in csrc/, built and loaded by
cpu_native):

- amx_extend_attention (csrc/cpu_amx_extend.c): bfloat16 extend attention with both products on the AMX tile
  unit; f32_extend_attention (csrc/cpu_flash_f32.c): float32 extend attention by register-blocked FMA loops, and
  bf16_extend_attention the same loops on bfloat16 q and KV widened to float32 (for CPUs without AMX).  All
  gather each request's keys and values once per KV head into their layout (csrc/extend_blocks.h) and take every
  request of a step in one call (radixlm_kernels/cpu_extend.py routes to them).
- amx_linear (csrc/cpu_amx_linear.c): a bfloat16 linear layer for the few rows of a decode step, streaming a copy
  of the weight packed by amx_linear_pack (runtime/models/packed_linear.py keeps that copy).
"""

from typing import Optional

import torch

from .cpu_native import _as_rows, _check_kv, _load, _require, _vector


def amx_extend_available(head_dim: int) -> bool:
    """Whether the tile-unit extend kernel runs here for this head dim: built for a CPU with AMX-BF16, Linux
    granted the process the tile state, and head_dim is 64 or 128."""
    lib = _load()
    return lib is not None and bool(lib.radixlm_amx_extend_available(int(head_dim)))


def f32_extend_available(head_dim: int) -> bool:
    """Whether the float32 packed extend kernel takes this head dim (a multiple of 64 with AVX-512, else of 32)."""
    lib = _load()
    return lib is not None and bool(lib.radixlm_f32_extend_available(int(head_dim)))


def dp_extend_available(head_dim: int) -> bool:
    """Whether the bfloat16 pair-product extend kernel runs here: built for a CPU with AVX512-BF16, head dim a
    multiple of 64."""
    lib = _load()
    return lib is not None and bool(lib.radixlm_dp_extend_available(int(head_dim)))


def amx_extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                         out=None, starts=None):
    """Same contract as torch_ref.extend_attention for bfloat16 q and KV (csrc/cpu_amx_extend.c: both products
    on the tile unit).  starts: each request's first row in q and out (rows of requests not given are left
    alone); default: the requests' rows in order.  Needs amx_extend_available(head_dim)."""
    return _packed_extend(_require().radixlm_amx_extend_attention, torch.bfloat16, q, k_buffer, v_buffer,
                          req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale, out, starts)


def f32_extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                         out=None, starts=None):
    """amx_extend_attention's contract for float32 q and KV (csrc/cpu_flash_f32.c: register-blocked FMA loops).
    Needs f32_extend_available(head_dim)."""
    return _packed_extend(_require().radixlm_f32_extend_attention, torch.float32, q, k_buffer, v_buffer,
                          req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale, out, starts)


def bf16_extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                          out=None, starts=None):
    """amx_extend_attention's contract for bfloat16 q and KV computed in float32 by the FMA loops of
    f32_extend_attention (csrc/cpu_flash_f32.c), for CPUs without AMX.  Needs f32_extend_available(head_dim)."""
    return _packed_extend(_require().radixlm_bf16_extend_attention, torch.bfloat16, q, k_buffer, v_buffer,
                          req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale, out, starts)


def dp_extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                        out=None, starts=None):
    """amx_extend_attention's contract and roundings (float32 sums of exact products, softmax weights rounded to
    bfloat16) with both products by AVX512-BF16 pair dot products (csrc/dp_pairs.h), for CPUs without AMX.
    Needs dp_extend_available(head_dim)."""
    return _packed_extend(_require().radixlm_dp_extend_attention, torch.bfloat16, q, k_buffer, v_buffer,
                          req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale, out, starts)


def _packed_extend(fn, dtype, q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                   sm_scale, out, starts):
    _check_kv(k_buffer, v_buffer, req_to_token)
    n, num_q_heads, head_dim = q.shape
    if q.dtype != dtype or k_buffer.dtype != dtype:
        raise TypeError(f"this extend kernel takes {dtype} q and KV, got {q.dtype} and {k_buffer.dtype}")
    if q.stride(2) != 1 or q.stride(1) != head_dim:
        q = q.contiguous()
    if out is None:
        out = torch.empty((n, num_q_heads, head_dim), dtype=dtype)
    if not out.is_contiguous() or out.dtype != dtype or out.shape != q.shape:
        raise ValueError(f"out must be a contiguous {dtype} tensor shaped like q")
    rows = req_pool_indices.to(torch.int64).contiguous()           # [B]
    prefix = prefix_lens.to(torch.int64).contiguous()              # [B]
    ext = extend_lens.to(torch.int64).contiguous()                 # [B]
    first = (torch.cumsum(ext, 0) - ext if starts is None else torch.as_tensor(starts, dtype=torch.int64)).contiguous()
    status = fn(q.data_ptr(), q.stride(0), k_buffer.data_ptr(), v_buffer.data_ptr(), req_to_token.data_ptr(),
                req_to_token.stride(0), rows.data_ptr(), prefix.data_ptr(), ext.data_ptr(), first.data_ptr(),
                rows.numel(), num_q_heads, k_buffer.shape[1], head_dim, float(sm_scale), out.data_ptr(),
                torch.get_num_threads())
    if status == 1:
        raise MemoryError("native extend attention could not allocate its buffers")
    if status != 0:
        raise RuntimeError(f"this native extend kernel cannot run here (head dim {head_dim})")
    return out


AMX_LINEAR_MAX_ROWS = 64


def amx_linear_available(in_features: int) -> bool:
    """Whether amx_linear runs here: built for a CPU with AMX-BF16, tile state granted, in_features % 32 == 0."""
    lib = _load()
    return lib is not None and bool(lib.radixlm_amx_linear_available(int(in_features)))


def amx_linear_pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] bfloat16 -> its copy in the tile unit's operand layout (csrc/cpu_amx_linear.c), 1-D."""
    n, k = weight.shape
    if weight.dtype != torch.bfloat16 or not amx_linear_available(k):
        raise ValueError(f"amx_linear_pack takes a bfloat16 weight whose in_features AMX can run, got {weight.dtype} "
                         f"{tuple(weight.shape)}")
    w = weight.detach().contiguous()
    packed = torch.empty((n + 15) // 16 * 16 * k, dtype=torch.bfloat16)
    _require().radixlm_amx_linear_pack(w.data_ptr(), n, k, packed.data_ptr(), torch.get_num_threads())
    return packed


def amx_linear(x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: Optional[torch.Tensor] = None):
    """x [M, K] bfloat16, 1 <= M <= AMX_LINEAR_MAX_ROWS (rows may be strided) @ W^T (+ bias) -> [M, N] bfloat16,
    W given as amx_linear_pack(W)."""
    rows = _as_rows(x, "x")
    m, k = rows.shape
    if x.dtype != torch.bfloat16 or packed.numel() != (out_features + 15) // 16 * 16 * k:
        raise ValueError("amx_linear takes bfloat16 rows and the packed copy of a [out_features, K] weight")
    if bias is not None:
        bias = _vector(bias, out_features, torch.bfloat16)
    out = torch.empty((m, out_features), dtype=torch.bfloat16)
    status = _require().radixlm_amx_linear(rows.data_ptr(), rows.stride(0), m, k, packed.data_ptr(), out_features,
                                           None if bias is None else bias.data_ptr(), out.data_ptr(), out_features,
                                           torch.get_num_threads())
    if status == 1:
        raise MemoryError("amx_linear could not allocate its buffer")
    if status != 0:
        raise ValueError(f"amx_linear cannot run {m} rows of {k} inputs here")
    return out
