"""Paged extend (prefill after a cache hit) attention in Triton.

Reference semantics: ``torch_ref.extend_attention``.  Grid (B, Hq, blocks of BLOCK_M new tokens).
A program loads BLOCK_M query rows of one head of one request, then keeps an online softmax over
(1) the request's cached prefix, BLOCK_N positions at a time through ``req_to_token`` with only a
length mask, and (2) the request's new tokens, also read from the pool through ``req_to_token``
(``store_kv`` has already written them), with the causal mask, stopping at the block's last row.
Requests of any mix of prefix and extend lengths share one launch; rows past a request's extend
length are masked.  Base-2 exponentials with the scale folded with log2 e.
Imports triton at module load: reach it through ``radixlm.kernels.dispatch``.
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634


@triton.jit
def _dot(a, b, DOT_FP32: tl.constexpr):
    """a @ b with fp32 accumulation.  DOT_FP32 upcasts the operands first: the CPU interpreter
    mishandles bf16 tl.dot, and bf16 x bf16 products are exact in fp32, so the result is the same."""
    if DOT_FP32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _attend_block(q, m_i, l_i, acc, Kh, Vh, slots, keep, kv_mask, offs_d, stride_kn, stride_vn,
                  qk_scale, DOT_FP32: tl.constexpr):
    """Fold one block of keys into the online softmax of the [BM, BD] queries q.

    Kh, Vh: the KV head's base pointers; slots: [BN] pool slots; keep: [BM, BN] (or [1, BN])
    visibility; kv_mask: [BN, BD] valid K/V elements.  Returns the new (m_i, l_i, acc).
    """
    k = tl.load(Kh + slots[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
    s = _dot(q, tl.trans(k), DOT_FP32) * qk_scale  # [BM, BN] base-2 scores
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # [BM]
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
    alpha = tl.exp2(m_i - m_safe)  # [BM]
    p = tl.exp2(s - m_safe[:, None])  # [BM, BN]
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(Vh + slots[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_FP32)
    return m_new, l_i, acc


@triton.jit
def _extend_kernel(
    Q, K, V, Out, ReqToToken, ReqPoolIdx, PrefixLens, ExtendLens, ExtendStart,
    qk_scale,
    stride_qt, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh, stride_ot, stride_oh,
    stride_r2t,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    """Program (b, head, block_m): Out rows ExtendStart[b] + i, i in this block of request b's
    new tokens = softmax(q_i K^T scale) V over positions <= PrefixLens[b] + i of request b's keys,
    read from the pool through ReqToToken[ReqPoolIdx[b]].  Blocks past ExtendLens[b] do nothing."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    block_m = tl.program_id(2)
    ext_len = tl.load(ExtendLens + b)
    if block_m * BLOCK_M < ext_len:
        prefix_len = tl.load(PrefixLens + b)
        q_start = tl.load(ExtendStart + b).to(tl.int64)
        row = tl.load(ReqPoolIdx + b).to(tl.int64)
        kv_head = head // GROUP
        Kh = K + kv_head * stride_kh  # this head's keys
        Vh = V + kv_head * stride_vh
        r2t = ReqToToken + row * stride_r2t

        offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM] index among the new tokens
        offs_d = tl.arange(0, BLOCK_D)  # [BD]
        offs_n0 = tl.arange(0, BLOCK_N)  # [BN]
        mask_m = offs_m < ext_len
        mask_d = offs_d < HEAD_DIM
        q = tl.load(Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                    mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # [BM, BD]
        q = q.to(K.dtype.element_ty)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        # (1) cached prefix: every new token sees all of it.
        for start_n in range(0, prefix_len, BLOCK_N):
            offs_n = start_n + offs_n0  # [BN] positions
            mask_n = offs_n < prefix_len
            slots = tl.load(r2t + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BN]
            m_i, l_i, acc = _attend_block(q, m_i, l_i, acc, Kh, Vh, slots, mask_n[None, :],
                                          mask_n[:, None] & mask_d[None, :], offs_d,
                                          stride_kn, stride_vn, qk_scale, DOT_FP32)

        # (2) the new tokens themselves, causally: row i sees new tokens j <= i.
        end_n = tl.minimum(ext_len, (block_m + 1) * BLOCK_M)
        for start_n in range(0, end_n, BLOCK_N):
            offs_n = start_n + offs_n0  # [BN] index among the new tokens
            mask_n = offs_n < ext_len
            slots = tl.load(r2t + prefix_len + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BN]
            causal = mask_n[None, :] & (offs_n[None, :] <= offs_m[:, None])  # [BM, BN]
            m_i, l_i, acc = _attend_block(q, m_i, l_i, acc, Kh, Vh, slots, causal,
                                          mask_n[:, None] & mask_d[None, :], offs_d,
                                          stride_kn, stride_vn, qk_scale, DOT_FP32)

        res = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # [BM, BD]
        tl.store(Out + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
                 res.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def _launch_config(device, head_dim):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages)."""
    if torch.device(device).type != "cuda":
        return 16, 16, 1, 1  # interpreter: small blocks keep the tests fast and cover several blocks
    if head_dim > 128:
        return 64, 32, 4, 2
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == (8, 0) or major >= 9:  # A100 / H100-class shared memory
        return 128, 64, (4 if head_dim <= 64 else 8), 2
    return 64, 64, 4, 2


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None, max_extend_len=None, extend_start=None):
    """New tokens of each request attend to its cached prefix and causally to themselves.

    q: [T, Hq, D], the requests' new tokens concatenated in batch order (T = sum(extend_lens));
    k_buffer, v_buffer: [num_slots, Hkv, D]; req_to_token: [R, C] int; req_pool_indices,
    prefix_lens, extend_lens: [B] int.  The new tokens' K/V must already be stored in the pool:
    request b's keys are k_buffer[req_to_token[row_b, :prefix_lens[b] + extend_lens[b]]], and new
    token i (0-based) of request b sees keys at positions <= prefix_lens[b] + i.  Query head h reads
    KV head h // (Hq // Hkv).  Returns out: [T, Hq, D] (q's dtype, or written into ``out``).
    Same as ``torch_ref.extend_attention``.  max_extend_len: host-side max(extend_lens), if known,
    saves one device-to-host read (a sync per layer on CUDA); extend_start: [B] offset of each
    request's first row in q (the exclusive cumsum of extend_lens), if known, saves a launch.
    """
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    assert num_q_heads % num_kv_heads == 0, (num_q_heads, num_kv_heads)
    assert k_buffer.shape[2] == head_dim and v_buffer.shape[2] == head_dim
    assert k_buffer.stride(-1) == 1 and v_buffer.stride(-1) == 1, "KV pool must be contiguous in D"
    if out is None:
        out = torch.empty((num_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)  # [T, Hq, D]
    bsz = extend_lens.shape[0]
    if num_tokens == 0 or bsz == 0:
        return out
    assert out.stride(-1) == 1, "out must be contiguous in D"
    if q.stride(-1) != 1:
        q = q.contiguous()  # [T, Hq, D]
    if req_to_token.stride(-1) != 1:
        req_to_token = req_to_token.contiguous()  # [R, C]
    extend_lens = extend_lens.contiguous()  # [B]
    if extend_start is None:
        extend_start = torch.cumsum(extend_lens, 0) - extend_lens  # [B] offset of each request in q
    if max_extend_len is None:
        max_extend_len = int(extend_lens.max())
    if max_extend_len == 0:
        return out

    block_m, block_n, num_warps, num_stages = _launch_config(q.device, head_dim)
    grid = (bsz, num_q_heads, triton.cdiv(max_extend_len, block_m))
    _extend_kernel[grid](
        q, k_buffer, v_buffer, out, req_to_token, req_pool_indices.contiguous(),
        prefix_lens.contiguous(), extend_lens, extend_start.contiguous(),
        sm_scale * _LOG2E,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1),
        v_buffer.stride(0), v_buffer.stride(1), out.stride(0), out.stride(1), req_to_token.stride(0),
        GROUP=num_q_heads // num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(head_dim),
        DOT_FP32=q.device.type != "cuda", num_warps=num_warps, num_stages=num_stages,
    )
    return out
