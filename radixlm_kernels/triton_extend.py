"""Paged extend (prefill after a cache hit) attention in Triton.

Reference semantics: ``torch_ref.extend_attention``.  Grid (blocks of new tokens, Hq // PACK, B), the
long axis first and walked from the last block down, so the blocks with the most keys start first.
A program loads BLOCK_M query rows of one request: BLOCK_M // PACK new tokens x PACK query heads of one
GQA group (``pack_heads``), so each K/V tile serves PACK heads, then keeps an online softmax over
(1) the request's cached prefix, BLOCK_N positions at a time through ``req_to_token`` (one [BLOCK_N]
slot vector per tile, then [BLOCK_N, D] K and V tiles), unmasked but for its last partial tile,
(2) the request's new tokens before this block (``store_kv`` has already written them to the pool),
unmasked: every row sees all of them, and (3) the diagonal tiles, the only ones with the causal mask;
tiles past the block's last row are never visited.  Requests of any mix of prefix and extend lengths
share one launch; rows past a request's extend length are masked.  Base-2 exponentials with the
scale folded with log2 e.  Launch configs come from ``EXTEND_CONFIGS`` by (arch, head dim, shape
class), never autotuned at serve time (``bench/kernels.py --tune`` measures ``EXTEND_CANDIDATES``).
Imports triton at module load: reach it through ``radixlm.kernels.dispatch``.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .triton_decode import _device_key, _falcon_bias, _round_bf16, _softcap, device_arch, head_dim_class

_LOG2E = 1.4426950408889634
SMALL_EXTEND = 64  # max_extend_len up to this is the "small" shape class (decode-like extends, drafts)
MEDIUM_EXTEND = 1024  # up to this "medium", above it "large"


@dataclass(frozen=True)
class ExtendConfig:
    block_m: int     # query rows per program: block_m // pack new tokens x pack heads
    block_n: int     # keys per tile
    num_warps: int
    num_stages: int
    max_pack: int = 8  # query heads of one GQA group per program (pack_heads), sharing each K/V tile


# (arch, head-dim class, shape class) -> config; shape class by max_extend_len (``shape_class``): "small"
# (<= SMALL_EXTEND: decode-like extends, drafts), "medium" (<= MEDIUM_EXTEND: cache-hit extends, chunks),
# "large" (long prompts).  Arch as in triton_decode.device_arch.  sm90 d=128 from `bench/kernels.py --quick
# --tune` on an H200 (Triton 3.6); the d=64, d=256 and sm80 entries are not measured yet.
EXTEND_CONFIGS = {
    **{("interp", d, c): ExtendConfig(16, 16, 1, 1) for d in (64, 128, 256) for c in ("small",)},
    **{("interp", d, c): ExtendConfig(32, 16, 1, 1) for d in (64, 128, 256) for c in ("medium", "large")},
    ("sm90", 64, "small"): ExtendConfig(128, 64, 4, 3),
    ("sm90", 64, "medium"): ExtendConfig(128, 64, 4, 3),
    ("sm90", 64, "large"): ExtendConfig(128, 128, 8, 3, 4),
    ("sm90", 128, "small"): ExtendConfig(128, 64, 4, 3),
    ("sm90", 128, "medium"): ExtendConfig(128, 64, 4, 3),
    ("sm90", 128, "large"): ExtendConfig(128, 128, 8, 3, 4),
    **{("sm90", 256, c): ExtendConfig(64, 32, 4, 2) for c in ("small", "medium", "large")},
    **{("sm80", d, c): ExtendConfig(64, 64, 4, 2) for d in (64, 128) for c in ("small", "medium")},
    **{("sm80", d, "large"): ExtendConfig(128, 64, 8 if d == 128 else 4, 2) for d in (64, 128)},
    **{("sm80", 256, c): ExtendConfig(64, 32, 4, 2) for c in ("small", "medium", "large")},
}
# 4-byte K/V on a GPU (tests, float32 models): the bf16 tiles would overflow shared memory.
FP32_CONFIG = ExtendConfig(64, 32, 4, 2)
# What bench/kernels.py --tune tries on a GPU.
EXTEND_CANDIDATES = [ExtendConfig(*c) for c in [
    (128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3),
    (64, 32, 4, 3), (64, 64, 4, 4), (128, 128, 8, 3, 1), (128, 64, 4, 3, 1), (64, 64, 4, 3, 1), (128, 128, 8, 3, 4),
    (128, 64, 4, 3, 2), (256, 64, 8, 3), (256, 128, 8, 2)]]


@triton.jit
def _dot(a, b, DOT_FP32: tl.constexpr):
    """a @ b with fp32 accumulation.  DOT_FP32 upcasts the operands first: the CPU interpreter
    mishandles bf16 tl.dot, and bf16 x bf16 products are exact in fp32, so the result is the same."""
    if DOT_FP32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _attend_tile(q, m_i, l_i, acc, Kh, Vh, Pos, offs_n, offs_m, offs_d, limit, causal_base,
                 stride_kn, stride_vn, qk_scale,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                 BLOCK_D: tl.constexpr, DOT_FP32: tl.constexpr, KV_FP8: tl.constexpr):
    """Fold keys Pos[offs_n] (slots read through req_to_token) into the online softmax of the [BM, BD]
    queries q.  MASKED: keys offs_n >= limit are invisible; CAUSAL (with MASKED): row i also sees
    only keys with offs_n <= causal_base + offs_m[i].  Unmasked tiles load with no mask at all
    (but the head dim's padding).  KV_FP8: e4m3 K/V tiles widened to q's dtype (their scales are applied
    by the caller).  Returns the new (m_i, l_i, acc)."""
    if MASKED:
        mask_n = offs_n < limit  # [BN]
        slots = tl.load(Pos + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BN]
        if BLOCK_D == HEAD_DIM:
            kv_mask = mask_n[:, None]
        else:
            kv_mask = mask_n[:, None] & (offs_d[None, :] < HEAD_DIM)
    else:
        slots = tl.load(Pos + offs_n).to(tl.int64)  # [BN]
        kv_mask = offs_d[None, :] < HEAD_DIM  # [1, BD] the head dim's padding only
    k_ptrs = Kh + slots[:, None] * stride_kn + offs_d[None, :]  # [BN, BD]
    v_ptrs = Vh + slots[:, None] * stride_vn + offs_d[None, :]  # [BN, BD]
    if MASKED or BLOCK_D != HEAD_DIM:
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)  # [BN, BD]
    else:
        k = tl.load(k_ptrs)  # [BN, BD] whole tile: no mask at all
    if KV_FP8:
        k = k.to(q.dtype)
    s = _dot(q, tl.trans(k), DOT_FP32) * qk_scale  # [BM, BN] base-2 scores
    if MASKED:
        if CAUSAL:
            keep = mask_n[None, :] & (offs_n[None, :] <= causal_base + offs_m[:, None])  # [BM, BN]
        else:
            keep = mask_n[None, :]  # [1, BN]
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # [BM]
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))  # [BM]
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)  # [BM]
    p = tl.exp2(s - m_use[:, None])  # [BM, BN]
    l_i = l_i * alpha + tl.sum(p, 1)
    if MASKED or BLOCK_D != HEAD_DIM:
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)  # [BN, BD]
    else:
        v = tl.load(v_ptrs)  # [BN, BD]
    if KV_FP8:
        v = v.to(q.dtype)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_FP32)
    return m_new, l_i, acc


@triton.jit
def _attend_window_tile(q, m_i, l_i, acc, Kh, Vh, r2t, offs_n, q_pos, offs_d, limit, window, softcap, slopes,
                        q_bias, alibi_scale, stride_kn, stride_vn, qk_scale,
                        WINDOWED: tl.constexpr, SOFTCAP: tl.constexpr, HEAD_DIM: tl.constexpr,
                        BLOCK_D: tl.constexpr, DOT_FP32: tl.constexpr, KV_FP8: tl.constexpr, ALIBI: tl.constexpr,
                        ALIBI_BF16: tl.constexpr):
    """Fold the keys at positions offs_n [BN] of the request's row r2t into the online softmax of the [BM, BD]
    queries q at positions q_pos [BM]: row i sees keys offs_n < limit with offs_n <= q_pos[i] (and, WINDOWED,
    offs_n > q_pos[i] - window); SOFTCAP: qk_scale is the natural scale, scores are capped at softcap; ALIBI: row i's
    score gains slopes[i] * (offs_n - q_pos[i]) (slopes [BM] in base 2), or with ALIBI_BF16 (Falcon; slopes [BM]
    bfloat16 values) (_falcon_bias(slopes[i], offs_n) - q_bias[i]) * alibi_scale (base 2).
    KV_FP8: e4m3 K/V tiles widened to q's dtype (their scales are applied by the caller)."""
    mask_n = offs_n < limit  # [BN]
    slots = tl.load(r2t + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BN]
    kv_mask = mask_n[:, None] & (offs_d[None, :] < HEAD_DIM)  # [BN, BD]
    k = tl.load(Kh + slots[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
    if KV_FP8:
        k = k.to(q.dtype)
    s = _dot(q, tl.trans(k), DOT_FP32) * qk_scale  # [BM, BN]
    if SOFTCAP:
        s = _softcap(s, softcap) * 1.4426950408889634  # [BM, BN] base 2
    if ALIBI:
        if ALIBI_BF16:
            s += (_falcon_bias(slopes[:, None], offs_n[None, :]) - q_bias[:, None]) * alibi_scale  # [BM, BN]
        else:
            s += slopes[:, None] * (offs_n[None, :] - q_pos[:, None]).to(tl.float32)  # [BM, BN]
    keep = mask_n[None, :] & (offs_n[None, :] <= q_pos[:, None])  # [BM, BN]
    if WINDOWED:
        keep = keep & (offs_n[None, :] > q_pos[:, None] - window)
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # [BM]
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
    alpha = tl.exp2(m_i - m_use)  # [BM]
    p = tl.exp2(s - m_use[:, None])  # [BM, BN]
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(Vh + slots[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)  # [BN, BD]
    if KV_FP8:
        v = v.to(q.dtype)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_FP32)
    return m_new, l_i, acc


@triton.jit(do_not_specialize=["window"])
def _extend_kernel(
    Q, K, V, Out, ReqToToken, ReqPoolIdx, PrefixLens, ExtendLens, ExtendStart, Sinks, Alibi,
    qk_scale, v_scale, window, softcap, alibi_scale,
    stride_qt, stride_qh, stride_kn, stride_vn, stride_ot, stride_oh, stride_r2t,
    GROUP: tl.constexpr, PACK: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_FP32: tl.constexpr, KV_FP8: tl.constexpr, WINDOWED: tl.constexpr, SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr, ALIBI: tl.constexpr, ALIBI_BF16: tl.constexpr,
):
    """Program (block, head group, b), block_t = num_blocks - 1 - block: BLOCK_M query rows = BLOCK_M // PACK
    new tokens of request b x PACK query heads that share one KV head (row r: token t_lo + r // PACK, head
    head0 + r % PACK), so each K/V tile is loaded once for PACK heads.  Out rows ExtendStart[b] + i =
    softmax(q_i K^T scale) V over positions <= PrefixLens[b] + i of request b's keys, read from the pool
    through ReqToToken[ReqPoolIdx[b]].  Blocks past ExtendLens[b] do nothing.  K/V rows are [Hkv, D]
    contiguous.  KV_FP8: e4m3 K/V, K's scale folded into qk_scale, V's (v_scale) applied to the output.
    WINDOWED or SOFTCAP: one masked walk over the block's visible positions (_attend_window_tile) instead of
    the three phases (with or without KV_FP8); so does ALIBI (Alibi[h]: head h's slope; ALIBI_BF16: Falcon's rounded
    biases times alibi_scale).  HAS_SINKS: Sinks[h]
    (natural log) joins row h's denominator."""
    block_t = tl.num_programs(0) - 1 - tl.program_id(0)
    head0 = tl.program_id(1) * PACK
    b = tl.program_id(2)
    ext_len = tl.load(ExtendLens + b)
    t_lo = block_t * (BLOCK_M // PACK)  # first new token of this block
    if t_lo < ext_len:
        prefix_len = tl.load(PrefixLens + b)
        q_start = tl.load(ExtendStart + b).to(tl.int64)
        row = tl.load(ReqPoolIdx + b).to(tl.int64)
        kv_head = head0 // GROUP
        Kh = K + kv_head * HEAD_DIM  # this KV head's column of the pool rows
        Vh = V + kv_head * HEAD_DIM
        r2t = ReqToToken + row * stride_r2t

        rows = tl.arange(0, BLOCK_M)  # [BM]
        offs_t = t_lo + rows // PACK  # [BM] index among the new tokens
        heads = head0 + rows % PACK  # [BM] query head
        offs_d = tl.arange(0, BLOCK_D)  # [BD]
        offs_n0 = tl.arange(0, BLOCK_N)  # [BN]
        mask_m = offs_t < ext_len
        mask_d = offs_d < HEAD_DIM
        io_mask = mask_m[:, None] & mask_d[None, :]  # [BM, BD]
        q = tl.load(Q + (q_start + offs_t)[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=io_mask, other=0.0)  # [BM, BD]
        if not KV_FP8:
            q = q.to(K.dtype.element_ty)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        if WINDOWED or SOFTCAP or ALIBI:
            slopes = tl.zeros([BLOCK_M], dtype=tl.float32)
            q_pos = prefix_len + offs_t  # [BM] each row's position
            q_bias = slopes
            if ALIBI:
                if ALIBI_BF16:
                    slopes = _round_bf16(tl.load(Alibi + heads).to(tl.float32))  # [BM]
                    q_bias = _falcon_bias(slopes, q_pos)  # [BM] each row's own (unscaled)
                else:
                    slopes = tl.load(Alibi + heads).to(tl.float32) * 1.4426950408889634  # [BM] base 2
            limit = prefix_len + tl.minimum(ext_len, t_lo + BLOCK_M // PACK)  # past the block's last token
            lo = 0
            if WINDOWED:
                lo = tl.maximum(prefix_len + t_lo - window + 1, 0) // BLOCK_N * BLOCK_N
            for start_n in range(lo, limit, BLOCK_N):
                m_i, l_i, acc = _attend_window_tile(q, m_i, l_i, acc, Kh, Vh, r2t, start_n + offs_n0, q_pos, offs_d,
                                                    limit, window, softcap, slopes, q_bias, alibi_scale, stride_kn,
                                                    stride_vn, qk_scale, WINDOWED, SOFTCAP, HEAD_DIM, BLOCK_D,
                                                    DOT_FP32, KV_FP8, ALIBI, ALIBI_BF16)
            if HAS_SINKS:
                l_i = l_i + tl.exp2(tl.load(Sinks + heads).to(tl.float32) * 1.4426950408889634 - m_i)  # [BM]
            res = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # [BM, BD]
            if KV_FP8:
                res = res * v_scale
            tl.store(Out + (q_start + offs_t)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                     res.to(Out.dtype.element_ty), mask=io_mask)
            return

        # (1) cached prefix: every new token sees all of it; whole tiles unmasked, the tail masked.
        prefix_full = (prefix_len // BLOCK_N) * BLOCK_N
        for start_n in range(0, prefix_full, BLOCK_N):
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, Kh, Vh, r2t, start_n + offs_n0, offs_t, offs_d,
                                         0, 0, stride_kn, stride_vn, qk_scale,
                                         False, False, HEAD_DIM, BLOCK_D, DOT_FP32, KV_FP8)
        if prefix_full < prefix_len:
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, Kh, Vh, r2t, prefix_full + offs_n0, offs_t, offs_d,
                                         prefix_len, 0, stride_kn, stride_vn, qk_scale,
                                         True, False, HEAD_DIM, BLOCK_D, DOT_FP32, KV_FP8)

        # (2) whole tiles of new tokens before this block's first token: visible to every row, unmasked.
        new = r2t + prefix_len
        diag_lo = (t_lo // BLOCK_N) * BLOCK_N
        for start_n in range(0, diag_lo, BLOCK_N):
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, Kh, Vh, new, start_n + offs_n0, offs_t, offs_d,
                                         0, 0, stride_kn, stride_vn, qk_scale,
                                         False, False, HEAD_DIM, BLOCK_D, DOT_FP32, KV_FP8)

        # (3) the diagonal: row i sees new tokens j <= its token; nothing past the block's last token.
        end_n = tl.minimum(ext_len, t_lo + BLOCK_M // PACK)
        for start_n in range(diag_lo, end_n, BLOCK_N):
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, Kh, Vh, new, start_n + offs_n0, offs_t, offs_d,
                                         ext_len, 0, stride_kn, stride_vn, qk_scale,
                                         True, True, HEAD_DIM, BLOCK_D, DOT_FP32, KV_FP8)

        if HAS_SINKS:
            l_i = l_i + tl.exp2(tl.load(Sinks + heads).to(tl.float32) * 1.4426950408889634 - m_i)  # [BM]
        res = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # [BM, BD]
        if KV_FP8:
            res = res * v_scale
        tl.store(Out + (q_start + offs_t)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                 res.to(Out.dtype.element_ty), mask=io_mask)


def pack_heads(group, block_m, max_pack):
    """Query heads per program: the largest power of two dividing the GQA group, at most max_pack and
    block_m (1 for group 3, 4 for group 4 or 12, ...)."""
    pack = 1
    while group % (2 * pack) == 0 and 2 * pack <= min(max_pack, block_m):
        pack *= 2
    return pack


SHAPE_CLASSES = ("small", "medium", "large")


def shape_class(max_extend_len):
    return "small" if max_extend_len <= SMALL_EXTEND else "medium" if max_extend_len <= MEDIUM_EXTEND else "large"


def extend_config(device, head_dim, max_extend_len, kv_bytes=2):
    """The table's launch config for this device, head dim, longest extend and K/V element size."""
    arch = device_arch(*_device_key(device))
    if kv_bytes > 2 and arch != "interp":
        return FP32_CONFIG
    return EXTEND_CONFIGS[(arch, head_dim_class(head_dim), shape_class(max_extend_len))]


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None, max_extend_len=None, extend_start=None, config=None, window=None,
                     softcap=None, k_scale=1.0, v_scale=1.0, sinks=None, alibi=None, alibi_bf16=None):
    """New tokens of each request attend to its cached prefix and causally to themselves.

    q: [T, Hq, D], the requests' new tokens concatenated in batch order (T = sum(extend_lens));
    k_buffer, v_buffer: [num_slots, Hkv, D] ([Hkv, D] rows contiguous); req_to_token: [R, C] int;
    req_pool_indices, prefix_lens, extend_lens: [B] int.  The new tokens' K/V must already be stored
    in the pool: request b's keys are k_buffer[req_to_token[row_b, :prefix_lens[b] + extend_lens[b]]],
    and new token i (0-based) of request b sees keys at positions <= prefix_lens[b] + i.  Query head h
    reads KV head h // (Hq // Hkv).  Returns out: [T, Hq, D] (q's dtype, or written into ``out``).
    Same as ``torch_ref.extend_attention``.  max_extend_len: host-side max(extend_lens), if known,
    saves one device-to-host read (a sync per layer on CUDA); extend_start: [B] offset of each
    request's first row in q (the exclusive cumsum of extend_lens), if known, saves a launch.
    config: an ExtendConfig (the bench's tuner); default from ``EXTEND_CONFIGS``.  window, softcap: the
    sliding window and score soft-capping of ``torch_ref`` (None: off, the kernel compiled without them).
    k_scale, v_scale: e4m3 buffers' scales (element * scale), else unused.  sinks: [Hq] attention-sink logits,
    alibi: [Hq] ALiBi slopes, alibi_bf16: Falcon's rounded ALiBi and its scale (all ``torch_ref``'s; None: none).
    """
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    assert num_q_heads % num_kv_heads == 0, (num_q_heads, num_kv_heads)
    assert k_buffer.shape[2] == head_dim and v_buffer.shape[2] == head_dim
    for buf in (k_buffer, v_buffer):
        assert buf.stride(2) == 1 and buf.stride(1) == head_dim, "KV pool rows must be contiguous [Hkv, D]"
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
    if not extend_lens.is_contiguous():
        extend_lens = extend_lens.contiguous()  # [B]
    if extend_start is None:
        extend_start = torch.cumsum(extend_lens, 0) - extend_lens  # [B] offset of each request in q
    if max_extend_len is None:
        max_extend_len = int(extend_lens.max())
    if max_extend_len == 0:
        return out

    # tiles are in the wider of q and K/V (e4m3 K/V are widened to q's dtype)
    cfg = config or extend_config(q.device, head_dim, max_extend_len, max(k_buffer.element_size(), q.element_size()))
    group = num_q_heads // num_kv_heads
    kv_fp8 = k_buffer.dtype == torch.float8_e4m3fn
    qk_scale = sm_scale * (float(k_scale) if kv_fp8 else 1.0)  # K's e4m3 scale folds into the scores
    if not softcap:
        qk_scale *= _LOG2E  # base-2 scores; soft-capping needs the natural ones and converts after the cap
    pack = pack_heads(group, cfg.block_m, cfg.max_pack)
    grid = (triton.cdiv(max_extend_len * pack, cfg.block_m), num_q_heads // pack, bsz)
    has_sinks = sinks is not None
    _extend_kernel[grid](
        q, k_buffer, v_buffer, out, req_to_token, req_pool_indices.contiguous(),
        prefix_lens.contiguous(), extend_lens, extend_start.contiguous(), sinks.contiguous() if has_sinks else out,
        alibi.contiguous() if alibi is not None else out,
        qk_scale, float(v_scale), int(window or 0), float(softcap or 1.0), float(alibi_bf16 or 0.0) * _LOG2E,
        q.stride(0), q.stride(1), k_buffer.stride(0), v_buffer.stride(0), out.stride(0), out.stride(1),
        req_to_token.stride(0),
        GROUP=group, PACK=pack, HEAD_DIM=head_dim,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=triton.next_power_of_2(head_dim),
        DOT_FP32=q.device.type != "cuda", KV_FP8=kv_fp8, WINDOWED=bool(window), SOFTCAP=bool(softcap),
        HAS_SINKS=has_sinks, ALIBI=alibi is not None, ALIBI_BF16=alibi is not None and alibi_bf16 is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
