"""Flash-decoding paged attention in Triton: one new query token per request.

Reference semantics: ``torch_ref.decode_attention``.  Two launches:

1. ``_decode_split_kernel``, grid (B, Hkv, num_splits).  Each program takes one request, one KV
   head and one chunk of the request's context.  It loads the G = Hq // Hkv query heads that share
   the KV head as one [BLOCK_H, D] block (G padded to a power of two, at least 16 so that ``tl.dot``
   maps to tensor cores), walks its chunk BLOCK_N slots at a time through ``req_to_token``, and
   keeps an online softmax.  It writes the chunk's normalised partial output and its log-sum-exp.
2. ``_decode_merge_kernel``, grid (B, Hq), combines the chunks: out = sum_s w_s o_s / sum_s w_s,
   w_s = 2^(lse_s - max lse).

Chunk length is ceil(ceil(seq_len / num_splits) / BLOCK_N) * BLOCK_N, computed on the device from
seq_lens, so nothing is synchronised with the host; trailing chunks of short requests are empty and
their programs exit at once.  Scores use base-2 exponentials (scale folded with log2 e).
Imports triton at module load: reach it through ``radixlm.kernels.dispatch``.
"""

import functools

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
def _decode_split_kernel(
    Q, K, V, ReqToToken, ReqPoolIdx, SeqLens, MidO, MidLse,
    qk_scale, num_splits,
    stride_qb, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh, stride_r2t,
    stride_mob, stride_moh, stride_mos, stride_mlb, stride_mlh,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    """Program (b, kv_head, split): chunk `split` of request b's keys, for the GROUP query heads of
    kv_head.  Writes MidO[b, h, split] = softmax(q_h K_c^T scale) V_c over the chunk's keys K_c, V_c
    (k_buffer/v_buffer at req_to_token[row_b, chunk]) and MidLse[b, h, split] = log2 sum 2^(scores).
    Empty chunks write nothing."""
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(SeqLens + b)
    split_len = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    if start < end:
        row = tl.load(ReqPoolIdx + b).to(tl.int64)
        offs_h = tl.arange(0, BLOCK_H)  # [BH] query heads of this group
        offs_d = tl.arange(0, BLOCK_D)  # [BD]
        mask_h = offs_h < GROUP
        mask_d = offs_d < HEAD_DIM
        heads = kv_head * GROUP + offs_h  # [BH]
        q = tl.load(Q + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=mask_h[:, None] & mask_d[None, :], other=0.0)  # [BH, BD]
        q = q.to(K.dtype.element_ty)

        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)  # running max (base 2)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)  # running sum of 2^(s - m)
        acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)  # running sum of p v
        for start_n in range(start, end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)  # [BN] positions
            mask_n = offs_n < end
            slots = tl.load(ReqToToken + row * stride_r2t + offs_n, mask=mask_n, other=0).to(tl.int64)
            kv_mask = mask_n[:, None] & mask_d[None, :]  # [BN, BD]
            k = tl.load(K + slots[:, None] * stride_kn + kv_head * stride_kh + offs_d[None, :],
                        mask=kv_mask, other=0.0)  # [BN, BD]
            s = _dot(q, tl.trans(k), DOT_FP32) * qk_scale  # [BH, BN]
            s = tl.where(mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # [BH]
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])  # [BH, BN]
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + slots[:, None] * stride_vn + kv_head * stride_vh + offs_d[None, :],
                        mask=kv_mask, other=0.0)  # [BN, BD]
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_FP32)
            m_i = m_new

        mo = (MidO + b.to(tl.int64) * stride_mob + heads[:, None] * stride_moh + split * stride_mos
              + offs_d[None, :])
        tl.store(mo, acc / l_i[:, None], mask=mask_h[:, None] & mask_d[None, :])
        ml = MidLse + b.to(tl.int64) * stride_mlb + heads * stride_mlh + split
        tl.store(ml, m_i + tl.log2(l_i), mask=mask_h)


@triton.jit
def _decode_merge_kernel(
    MidO, MidLse, SeqLens, Out, num_splits,
    stride_mob, stride_moh, stride_mos, stride_mlb, stride_mlh, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program (b, h): Out[b, h] = sum_s 2^lse_s MidO[b, h, s] / sum_s 2^lse_s over non-empty chunks,
    which equals softmax over all of request b's keys (the log-sum-exp merge)."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(SeqLens + b)
    split_len = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    offs_s = tl.arange(0, BLOCK_S)  # [BS]
    offs_d = tl.arange(0, BLOCK_D)  # [BD]
    mask_s = (offs_s < num_splits) & (offs_s * split_len < seq_len)  # non-empty chunks only
    mask_d = offs_d < HEAD_DIM
    b64 = b.to(tl.int64)
    lse = tl.load(MidLse + b64 * stride_mlb + head * stride_mlh + offs_s, mask=mask_s,
                  other=float("-inf"))  # [BS]
    w = tl.where(mask_s, tl.exp2(lse - tl.max(lse, 0)), 0.0)  # [BS]
    o = tl.load(MidO + b64 * stride_mob + head * stride_moh + offs_s[:, None] * stride_mos
                + offs_d[None, :], mask=mask_s[:, None] & mask_d[None, :], other=0.0)  # [BS, BD]
    res = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)  # [BD]
    tl.store(Out + b64 * stride_ob + head * stride_oh + offs_d, res.to(Out.dtype.element_ty),
             mask=mask_d)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def default_num_splits(batch_size, num_kv_heads, device):
    """Splits per request: enough (batch x kv-head x split) programs to fill the GPU twice.

    A power of two in [1, 32] so that few kernel variants are compiled; 2 on the CPU
    interpreter, which runs programs one after another.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 2
    target = 2 * _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    want = triton.cdiv(target, max(1, batch_size * num_kv_heads))
    return min(32, triton.next_power_of_2(want))


def _launch_config(device, head_dim):
    """(BLOCK_N, num_warps, num_stages) for the split kernel."""
    if torch.device(device).type != "cuda":
        return 16, 1, 1  # interpreter: small blocks keep the tests fast and cover several blocks
    return (64 if head_dim <= 128 else 32), 4, 2


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale,
                     out=None, num_splits=None):
    """One query token per request attends to the request's first seq_lens[b] cached tokens.

    q: [B, Hq, D]; k_buffer, v_buffer: [num_slots, Hkv, D]; req_to_token: [R, C] int;
    req_pool_indices: [B] int; seq_lens: [B] int, each >= 1.  Returns out: [B, Hq, D] (q's dtype,
    or written into ``out``) with
    out[b, h] = softmax(q[b, h] . K_b^T * sm_scale) V_b, K_b = k_buffer[req_to_token[row_b, :seq_lens[b]]],
    query head h reading KV head h // (Hq // Hkv).  Same as ``torch_ref.decode_attention``.
    num_splits: chunks per request (flash-decoding); default from ``default_num_splits``.
    """
    bsz, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    assert num_q_heads % num_kv_heads == 0, (num_q_heads, num_kv_heads)
    assert k_buffer.shape[2] == head_dim and v_buffer.shape[2] == head_dim
    assert k_buffer.stride(-1) == 1 and v_buffer.stride(-1) == 1, "KV pool must be contiguous in D"
    group = num_q_heads // num_kv_heads
    if out is None:
        out = torch.empty((bsz, num_q_heads, head_dim), dtype=q.dtype, device=q.device)  # [B, Hq, D]
    if bsz == 0:
        return out
    assert out.stride(-1) == 1, "out must be contiguous in D"
    if q.stride(-1) != 1:
        q = q.contiguous()  # [B, Hq, D]
    if req_to_token.stride(-1) != 1:
        req_to_token = req_to_token.contiguous()  # [R, C]
    req_pool_indices = req_pool_indices.contiguous()  # [B]
    seq_lens = seq_lens.contiguous()  # [B]
    if num_splits is None:
        num_splits = default_num_splits(bsz, num_kv_heads, q.device)
    num_splits = max(1, int(num_splits))

    block_n, num_warps, num_stages = _launch_config(q.device, head_dim)
    block_d = triton.next_power_of_2(head_dim)
    block_h = max(16, triton.next_power_of_2(group))
    mid_o = torch.empty((bsz, num_q_heads, num_splits, head_dim), dtype=torch.float32,
                        device=q.device)  # [B, Hq, S, D] normalised partial outputs
    mid_lse = torch.empty((bsz, num_q_heads, num_splits), dtype=torch.float32,
                          device=q.device)  # [B, Hq, S] base-2 log-sum-exp per chunk

    _decode_split_kernel[(bsz, num_kv_heads, num_splits)](
        q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, mid_o, mid_lse,
        sm_scale * _LOG2E, num_splits,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1),
        v_buffer.stride(0), v_buffer.stride(1), req_to_token.stride(0),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_N=block_n,
        DOT_FP32=q.device.type != "cuda", num_warps=num_warps, num_stages=num_stages,
    )
    _decode_merge_kernel[(bsz, num_q_heads)](
        mid_o, mid_lse, seq_lens, out, num_splits,
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=triton.next_power_of_2(num_splits),
        BLOCK_N=block_n, num_warps=4 if block_d >= 128 else 2,
    )
    return out
