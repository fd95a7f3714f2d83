"""Flash-decoding paged attention in Triton: one new query token per request.

Reference semantics: ``torch_ref.decode_attention``.  One or two launches:

1. ``_decode_split_kernel``, grid (B, Hkv, num_splits).  Each program takes one request, one KV
   head and one chunk of the request's context.  It loads the G = Hq // Hkv query heads that share
   the KV head as one [BLOCK_H, D] block (G padded to a power of two, at least 16 so that ``tl.dot``
   maps to tensor cores), walks its chunk BLOCK_N slots at a time through ``req_to_token`` (one
   [BLOCK_N] slot vector per tile, then [BLOCK_N, D] K and V tiles), and keeps an online softmax.
   With one split it writes the output itself (one launch: short work is launch bound); else it
   writes the chunk's normalised partial output and its log-sum-exp, and
2. ``_decode_merge_kernel``, grid (B, Hq), combines the chunks: out = sum_s w_s o_s / sum_s w_s,
   w_s = 2^(lse_s - max lse).

Splits are chosen from the work: on the host, enough (batch x kv-head x split) programs to fill the
GPU ``waves`` times, but no more than max_seq_len / min_chunk when the caller knows max_seq_len; on the
device, chunk length = max(min_chunk, ceil(ceil(seq_len / num_splits) / BLOCK_N) * BLOCK_N) from
seq_lens, so short requests use few chunks without a host read (CUDA graphs keep working); trailing
chunks are empty and their programs exit at once.  Scores use base-2 exponentials (scale folded with
log2 e).  Launch configs come from ``DECODE_CONFIGS`` (no autotuning at serve time; ``bench/kernels.py
--tune`` measures the candidates).  Imports triton at module load: reach it through
``radixlm.kernels.dispatch``.
"""

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
MAX_SPLITS = 32  # the merge kernel reads this many chunks (masked): one compiled merge per head dim


@dataclass(frozen=True)
class DecodeConfig:
    block_n: int     # keys per tile
    num_warps: int
    num_stages: int
    min_chunk: int   # fewest keys per split (a multiple of block_n)
    waves: int = 2   # (batch x kv-head x split) programs wanted per SM


# (arch, head-dim class) -> config; arch "sm90" (Hopper and later), "sm80" (Ampere/Ada), "interp" (CPU).
# sm90 d=128 from `bench/kernels.py --quick --tune` on an H200 (Triton 3.6): 3 stages won at B=256 (single
# split), a 128-key minimum chunk at B=1 ctx=512 (12.7 us against 15.3 us for 256); their combination and
# the d=64 and sm80 entries are not measured yet.
DECODE_CONFIGS = {
    ("interp", 64): DecodeConfig(16, 1, 1, 16),
    ("interp", 128): DecodeConfig(16, 1, 1, 16),
    ("interp", 256): DecodeConfig(16, 1, 1, 16),
    ("sm90", 64): DecodeConfig(64, 4, 3, 128),
    ("sm90", 128): DecodeConfig(64, 4, 3, 128),
    ("sm90", 256): DecodeConfig(32, 4, 2, 256),
    ("sm80", 64): DecodeConfig(64, 4, 2, 256),
    ("sm80", 128): DecodeConfig(64, 4, 2, 256),
    ("sm80", 256): DecodeConfig(32, 4, 2, 256),
}
# What bench/kernels.py --tune tries on a GPU.
DECODE_CANDIDATES = [DecodeConfig(bn, w, s, c) for bn, w, s, c in [
    (64, 4, 3, 128), (64, 4, 2, 256), (32, 4, 2, 256), (64, 4, 3, 256), (128, 4, 2, 256), (64, 8, 2, 256),
    (64, 4, 2, 128), (64, 4, 2, 512), (64, 4, 2, 1024), (32, 2, 2, 256)]]


@triton.jit
def _dot(a, b, DOT_FP32: tl.constexpr):
    """a @ b with fp32 accumulation.  DOT_FP32 upcasts the operands first: the CPU interpreter
    mishandles bf16 tl.dot, and bf16 x bf16 products are exact in fp32, so the result is the same."""
    if DOT_FP32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _split_len(seq_len, num_splits, BLOCK_N: tl.constexpr, MIN_CHUNK: tl.constexpr):
    """Keys per chunk of a request of seq_len keys: a multiple of BLOCK_N, at least MIN_CHUNK."""
    return tl.maximum(tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N, MIN_CHUNK)


@triton.jit
def _softcap(s, cap):
    """cap * tanh(s / cap), tanh written with exp (saturates to +-1 for large |s|)."""
    return cap * (1.0 - 2.0 / (tl.exp(2.0 * (s / cap)) + 1.0))


@triton.jit
def _round_bf16(x):
    """float32 x rounded to the nearest bfloat16 (ties to even), kept in float32: its bits with the low 16 rounded
    off (finite x)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _falcon_bias(slopes, pos):
    """Falcon's unscaled ALiBi bias bf16(slopes * bf16(pos)) (slopes already bfloat16 values, pos int)."""
    return _round_bf16(slopes * _round_bf16(pos.to(tl.float32)))


@triton.jit
def _window_lo(seq_len, window, WINDOWED: tl.constexpr):
    """First key position a request of seq_len keys attends to (0 without a window)."""
    if WINDOWED:
        return tl.maximum(seq_len - window, 0)
    else:
        return seq_len * 0


@triton.jit(do_not_specialize=["num_splits", "window"])
def _decode_split_kernel(
    Q, K, V, ReqToToken, ReqPoolIdx, SeqLens, Out, MidO, MidLse, Sinks, Alibi,
    qk_scale, v_scale, num_splits, window, softcap, alibi_scale,
    stride_qb, stride_qh, stride_kn, stride_vn, stride_r2t, stride_ob, stride_oh,
    NUM_Q_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, MIN_CHUNK: tl.constexpr,
    MAX_S: tl.constexpr, SINGLE: tl.constexpr, DOT_FP32: tl.constexpr, KV_FP8: tl.constexpr,
    WINDOWED: tl.constexpr, SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr, ALIBI: tl.constexpr,
    ALIBI_BF16: tl.constexpr,
):
    """Program (b, kv_head, split): chunk `split` of request b's keys, for the GROUP query heads of
    kv_head.  SINGLE (one split): Out[b, h] = softmax(q_h K^T scale) V over all of request b's keys.
    Else MidO[b, h, split] = the same over the chunk's keys K_c, V_c (k_buffer/v_buffer at
    req_to_token[row_b, chunk]) and MidLse[b, h, split] = log2 sum 2^(scores); empty chunks write
    nothing.  K/V rows are [Hkv, D] contiguous; MidO is [B, Hq, MAX_S, D], MidLse [B, Hq, MAX_S].
    KV_FP8: K and V are e4m3, widened to q's dtype per tile; K's scale is folded into qk_scale, V's
    (v_scale) multiplies the output.  WINDOWED: only the last `window` keys exist (the chunks split
    those); SOFTCAP: qk_scale is the natural scale and scores are soft-capped at `softcap` before the
    base-2 exponentials; HAS_SINKS: Sinks[h] (natural log) joins head h's denominator (in the merge kernel when
    split); ALIBI: head h's score of the key at position j gains Alibi[h] * (j - (seq_len - 1)), or with ALIBI_BF16
    (Falcon) (_falcon_bias(bf16(Alibi[h]), j) - _falcon_bias(bf16(Alibi[h]), seq_len - 1)) * alibi_scale (base 2).
    They combine."""
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(SeqLens + b)
    lo = _window_lo(seq_len, window, WINDOWED)
    if SINGLE:
        start = lo
        end = seq_len
    else:
        split_len = _split_len(seq_len - lo, num_splits, BLOCK_N, MIN_CHUNK)
        start = lo + split * split_len
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
        if not KV_FP8:
            q = q.to(K.dtype.element_ty)
        Kh = K + kv_head * HEAD_DIM  # this KV head's column of the pool rows
        Vh = V + kv_head * HEAD_DIM
        r2t = ReqToToken + row * stride_r2t
        if ALIBI:
            slopes = tl.load(Alibi + heads, mask=mask_h, other=0.0).to(tl.float32)  # [BH]
            if ALIBI_BF16:
                slopes = _round_bf16(slopes)
                q_bias = _falcon_bias(slopes, seq_len - 1)  # [BH] the query's own (unscaled)
            else:
                slopes = slopes * 1.4426950408889634  # [BH] base 2

        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)  # running max (base 2)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)  # running sum of 2^(s - m)
        acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)  # running sum of p v
        for start_n in range(start, end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)  # [BN] positions
            mask_n = offs_n < end
            slots = tl.load(r2t + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BN] one slot vector
            if BLOCK_D == HEAD_DIM:
                kv_mask = mask_n[:, None]  # [BN, 1]
            else:
                kv_mask = mask_n[:, None] & mask_d[None, :]  # [BN, BD]
            k = tl.load(Kh + slots[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
            if KV_FP8:
                k = k.to(q.dtype)
            s = _dot(q, tl.trans(k), DOT_FP32) * qk_scale  # [BH, BN]
            if SOFTCAP:
                s = _softcap(s, softcap) * 1.4426950408889634  # [BH, BN] base 2
            if ALIBI:
                if ALIBI_BF16:
                    s += (_falcon_bias(slopes[:, None], offs_n[None, :]) - q_bias[:, None]) * alibi_scale  # [BH, BN]
                else:
                    s += slopes[:, None] * (offs_n - (seq_len - 1)).to(tl.float32)[None, :]  # [BH, BN]
            s = tl.where(mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # [BH]
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])  # [BH, BN]
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(Vh + slots[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
            if KV_FP8:
                v = v.to(q.dtype)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_FP32)
            m_i = m_new

        out_mask = mask_h[:, None] & mask_d[None, :]  # [BH, BD]
        if KV_FP8:
            acc = acc * v_scale
        if SINGLE:
            if HAS_SINKS:
                sink = tl.load(Sinks + heads, mask=mask_h, other=0.0).to(tl.float32) * 1.4426950408889634  # [BH]
                l_i = l_i + tl.exp2(sink - m_i)
            o = Out + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
            tl.store(o, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=out_mask)
        else:
            bh = b.to(tl.int64) * NUM_Q_HEADS + heads  # [BH] row of (b, head) in MidO / MidLse
            mo = MidO + (bh[:, None] * MAX_S + split) * HEAD_DIM + offs_d[None, :]
            tl.store(mo, acc / l_i[:, None], mask=out_mask)
            tl.store(MidLse + bh * MAX_S + split, m_i + tl.log2(l_i), mask=mask_h)


@triton.jit(do_not_specialize=["num_splits", "window"])
def _decode_merge_kernel(
    MidO, MidLse, SeqLens, Out, Sinks, num_splits, window, stride_ob, stride_oh,
    NUM_Q_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr, MIN_CHUNK: tl.constexpr, WINDOWED: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    """Program (b, h): Out[b, h] = sum_s 2^lse_s MidO[b, h, s] / sum_s 2^lse_s over non-empty chunks,
    which equals softmax over all of request b's keys (the log-sum-exp merge; HAS_SINKS: 2^sink in the
    denominator too).  BLOCK_S = MAX_SPLITS."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(SeqLens + b)
    seq_len = seq_len - _window_lo(seq_len, window, WINDOWED)  # keys attended
    split_len = _split_len(seq_len, num_splits, BLOCK_N, MIN_CHUNK)
    offs_s = tl.arange(0, BLOCK_S)  # [BS]
    offs_d = tl.arange(0, BLOCK_D)  # [BD]
    mask_s = (offs_s < num_splits) & (offs_s * split_len < seq_len)  # non-empty chunks only
    mask_d = offs_d < HEAD_DIM
    bh = b.to(tl.int64) * NUM_Q_HEADS + head
    lse = tl.load(MidLse + bh * BLOCK_S + offs_s, mask=mask_s, other=float("-inf"))  # [BS]
    top = tl.max(lse, 0)
    w = tl.where(mask_s, tl.exp2(lse - top), 0.0)  # [BS]
    o = tl.load(MidO + (bh * BLOCK_S + offs_s[:, None]) * HEAD_DIM + offs_d[None, :],
                mask=mask_s[:, None] & mask_d[None, :], other=0.0)  # [BS, BD]
    denom = tl.sum(w, 0)
    if HAS_SINKS:
        denom += tl.exp2(tl.load(Sinks + head).to(tl.float32) * 1.4426950408889634 - top)
    res = tl.sum(w[:, None] * o, 0) / denom  # [BD]
    tl.store(Out + b.to(tl.int64) * stride_ob + head * stride_oh + offs_d, res.to(Out.dtype.element_ty),
             mask=mask_d)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def device_arch(device_type, device_index):
    """"sm90" (Hopper and later), "sm80" (earlier CUDA cards) or "interp" (the CPU interpreter)."""
    if device_type != "cuda":
        return "interp"
    major, _ = torch.cuda.get_device_capability(device_index)
    return "sm90" if major >= 9 else "sm80"


def _device_key(device):
    device = torch.device(device)
    index = device.index if device.index is not None or device.type != "cuda" else torch.cuda.current_device()
    return device.type, index


def head_dim_class(head_dim):
    return 64 if head_dim <= 64 else 128 if head_dim <= 128 else 256


def decode_config(device, head_dim):
    """The table's launch config for this device and head dim."""
    return DECODE_CONFIGS[(device_arch(*_device_key(device)), head_dim_class(head_dim))]


def choose_num_splits(batch_size, num_kv_heads, sm_count, max_seq_len=None, min_chunk=256, waves=2):
    """Splits per request from the work: enough (batch x kv-head x split) programs to fill sm_count SMs
    `waves` times, no more than ceil(max_seq_len / min_chunk) when max_seq_len is known, a power of two
    in [1, MAX_SPLITS] (one split: a single launch)."""
    programs = max(1, batch_size * num_kv_heads)
    want = -(-waves * sm_count // programs)
    if max_seq_len is not None:
        want = min(want, -(-int(max_seq_len) // min_chunk))
    return min(MAX_SPLITS, triton.next_power_of_2(max(1, want)))


def default_num_splits(batch_size, num_kv_heads, device, max_seq_len=None, head_dim=128, config=None):
    """choose_num_splits for this device and config (default: the table's; the interpreter counts as
    one SM, so tests stay small)."""
    cfg = config or decode_config(device, head_dim)
    device_type, index = _device_key(device)
    sms = _sm_count(index) if device_type == "cuda" else 1
    return choose_num_splits(batch_size, num_kv_heads, sms, max_seq_len, cfg.min_chunk, cfg.waves)


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale,
                     out=None, num_splits=None, max_seq_len=None, config=None, window=None, softcap=None,
                     k_scale=1.0, v_scale=1.0, sinks=None, alibi=None, alibi_bf16=None):
    """One query token per request attends to the request's first seq_lens[b] cached tokens.

    q: [B, Hq, D]; k_buffer, v_buffer: [num_slots, Hkv, D] ([Hkv, D] rows contiguous); req_to_token:
    [R, C] int; req_pool_indices: [B] int; seq_lens: [B] int, each >= 1.  Returns out: [B, Hq, D]
    (q's dtype, or written into ``out``) with
    out[b, h] = softmax(q[b, h] . K_b^T * sm_scale) V_b, K_b = k_buffer[req_to_token[row_b, :seq_lens[b]]],
    query head h reading KV head h // (Hq // Hkv).  Same as ``torch_ref.decode_attention``.
    num_splits: chunks per request (flash-decoding, at most MAX_SPLITS); default ``default_num_splits``.
    max_seq_len: host-side max(seq_lens) if known (never read from the device): caps the splits for
    short contexts; leave it None under CUDA graph capture.  config: a DecodeConfig (the bench's tuner);
    default from ``DECODE_CONFIGS``.  window, softcap: the sliding window and score soft-capping of
    ``torch_ref`` (None: off, the kernels compiled without them).  k_scale, v_scale: e4m3 buffers' scales
    (element * scale), else unused.  sinks: [Hq] attention-sink logits; alibi: [Hq] ALiBi slopes; alibi_bf16:
    Falcon's rounded ALiBi and its scale (all ``torch_ref``'s; None: none).
    """
    bsz, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    assert num_q_heads % num_kv_heads == 0, (num_q_heads, num_kv_heads)
    assert k_buffer.shape[2] == head_dim and v_buffer.shape[2] == head_dim
    for buf in (k_buffer, v_buffer):
        assert buf.stride(2) == 1 and buf.stride(1) == head_dim, "KV pool rows must be contiguous [Hkv, D]"
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
    if not req_pool_indices.is_contiguous():
        req_pool_indices = req_pool_indices.contiguous()  # [B]
    if not seq_lens.is_contiguous():
        seq_lens = seq_lens.contiguous()  # [B]
    cfg = config or decode_config(q.device, head_dim)
    if num_splits is None:
        num_splits = default_num_splits(bsz, num_kv_heads, q.device, max_seq_len, head_dim, cfg)
    num_splits = max(1, min(MAX_SPLITS, int(num_splits)))
    interp = q.device.type != "cuda"
    kv_fp8 = k_buffer.dtype == torch.float8_e4m3fn
    block_d = triton.next_power_of_2(head_dim)
    block_h = max(16, triton.next_power_of_2(group))
    qk_scale = sm_scale * (float(k_scale) if kv_fp8 else 1.0)  # K's e4m3 scale folds into the scores
    if not softcap:
        qk_scale *= _LOG2E  # base-2 scores; soft-capping needs the natural ones and converts after the cap
    single = num_splits == 1
    if single:
        mid_o = mid_lse = out  # unused
    else:
        mid_o = torch.empty((bsz, num_q_heads, MAX_SPLITS, head_dim), dtype=torch.float32,
                            device=q.device)  # [B, Hq, MAX_SPLITS, D] normalised partial outputs
        mid_lse = torch.empty((bsz, num_q_heads, MAX_SPLITS), dtype=torch.float32,
                              device=q.device)  # [B, Hq, MAX_SPLITS] base-2 log-sum-exp per chunk

    has_sinks = sinks is not None
    sinks = sinks.contiguous() if has_sinks else out  # [Hq] (out: an unused pointer)
    has_alibi = alibi is not None
    _decode_split_kernel[(bsz, num_kv_heads, num_splits)](
        q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, out, mid_o, mid_lse, sinks,
        alibi.contiguous() if has_alibi else out,
        qk_scale, float(v_scale), num_splits, int(window or 0), float(softcap or 1.0),
        float(alibi_bf16 or 0.0) * _LOG2E,
        q.stride(0), q.stride(1), k_buffer.stride(0), v_buffer.stride(0), req_to_token.stride(0),
        out.stride(0), out.stride(1),
        NUM_Q_HEADS=num_q_heads, GROUP=group, HEAD_DIM=head_dim, BLOCK_H=block_h, BLOCK_D=block_d,
        BLOCK_N=cfg.block_n, MIN_CHUNK=cfg.min_chunk, MAX_S=MAX_SPLITS, SINGLE=single, DOT_FP32=interp,
        KV_FP8=kv_fp8, WINDOWED=bool(window), SOFTCAP=bool(softcap), HAS_SINKS=has_sinks, ALIBI=has_alibi,
        ALIBI_BF16=has_alibi and alibi_bf16 is not None, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if not single:
        _decode_merge_kernel[(bsz, num_q_heads)](
            mid_o, mid_lse, seq_lens, out, sinks, num_splits, int(window or 0), out.stride(0), out.stride(1),
            NUM_Q_HEADS=num_q_heads, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=MAX_SPLITS,
            BLOCK_N=cfg.block_n, MIN_CHUNK=cfg.min_chunk, WINDOWED=bool(window), HAS_SINKS=has_sinks,
            num_warps=4 if block_d >= 128 else 2,
        )
    return out
