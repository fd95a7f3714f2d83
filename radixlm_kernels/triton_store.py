"""Triton kernel that writes new tokens' K/V into the paged KV pool.

Reference semantics: ``torch_ref.store_kv``.  Imports triton at module load: reach it through
``radixlm.kernels.dispatch`` so that CPU users never import triton.
"""

import triton
import triton.language as tl

from .torch_ref import E4M3, E4M3_MAX, to_kv


@triton.jit
def _store_kv_kernel(
    K, V, KBuf, VBuf, Loc, k_scale, v_scale,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_kbn, stride_kbh, stride_vbn, stride_vbh,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, QUANTIZE: tl.constexpr, FP8_MAX: tl.constexpr,
):
    """One program per token: copy its [Hkv, D] key and value rows into slot loc[t].  QUANTIZE (e4m3
    buffers): each element divided by its scale and clamped to +-FP8_MAX before the cast."""
    t = tl.program_id(0)
    slot = tl.load(Loc + t).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)  # [BH]
    offs_d = tl.arange(0, BLOCK_D)  # [BD]
    mask = (offs_h[:, None] < NUM_KV_HEADS) & (offs_d[None, :] < HEAD_DIM)  # [BH, BD]
    t64 = t.to(tl.int64)
    k = tl.load(K + t64 * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
    v = tl.load(V + t64 * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
    if QUANTIZE:
        k = tl.minimum(tl.maximum(k.to(tl.float32) / k_scale, -FP8_MAX), FP8_MAX)  # [BH, BD]
        v = tl.minimum(tl.maximum(v.to(tl.float32) / v_scale, -FP8_MAX), FP8_MAX)  # [BH, BD]
    tl.store(KBuf + slot * stride_kbn + offs_h[:, None] * stride_kbh + offs_d[None, :],
             k.to(KBuf.dtype.element_ty), mask=mask)
    tl.store(VBuf + slot * stride_vbn + offs_h[:, None] * stride_vbh + offs_d[None, :],
             v.to(VBuf.dtype.element_ty), mask=mask)


def _last_dim_contiguous(x):
    return x if x.stride(-1) == 1 else x.contiguous()


def store_kv(k_buffer, v_buffer, loc, k, v, k_scale=1.0, v_scale=1.0):
    """k_buffer[loc[i]] = k[i]; v_buffer[loc[i]] = v[i], cast to the buffer dtype (e4m3 buffers: k / k_scale
    and v / v_scale, clamped to e4m3's range).

    k_buffer, v_buffer: [num_slots, Hkv, D] (last dim contiguous); loc: [T] int32/int64 slot
    indices (distinct); k, v: [T, Hkv, D] (any strides).  Same as ``torch_ref.store_kv``.
    """
    num_tokens = loc.shape[0]
    if num_tokens == 0:
        return
    num_kv_heads, head_dim = k_buffer.shape[1], k_buffer.shape[2]
    assert k.shape == (num_tokens, num_kv_heads, head_dim), (k.shape, k_buffer.shape)
    assert v.shape == (num_tokens, num_kv_heads, head_dim), (v.shape, v_buffer.shape)
    assert k_buffer.stride(-1) == 1 and v_buffer.stride(-1) == 1, "KV pool must be contiguous in D"
    quantize = k_buffer.dtype == E4M3
    if k_buffer.device.type != "cuda":
        # The CPU interpreter rounds float32 -> bfloat16 (and e4m3) toward zero; cast on the host so the
        # interpreter matches torch (and the GPU, which rounds to nearest even).
        k = to_kv(k, k_buffer.dtype, k_scale)
        v = to_kv(v, v_buffer.dtype, v_scale)
        quantize = False
    k = _last_dim_contiguous(k)  # [T, Hkv, D]
    v = _last_dim_contiguous(v)  # [T, Hkv, D]
    loc = loc if loc.is_contiguous() else loc.contiguous()  # [T]
    _store_kv_kernel[(num_tokens,)](
        k, v, k_buffer, v_buffer, loc, float(k_scale), float(v_scale),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_H=triton.next_power_of_2(num_kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
        QUANTIZE=quantize, FP8_MAX=E4M3_MAX,
    )

