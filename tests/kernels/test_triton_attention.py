"""Triton paged-attention kernels against the torch reference (oracle: radixlm_kernels/torch_ref.py).

Without CUDA the kernels run on the CPU under the Triton interpreter (TRITON_INTERPRET=1, set
below before triton is first imported); the `gpu`-marked variants run the same checks compiled
on CUDA.  Shapes are tiny because the interpreter runs programs one after another.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

pytest.importorskip("triton")

from radixlm.kernels import dispatch, torch_ref  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
TRITON = dispatch._triton_ops() if (HAS_CUDA or dispatch.triton_interpreter_enabled()) else None
INTERPRETED = TRITON is not None and dispatch._kernels_interpreted()

DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(
        not INTERPRETED,
        reason="kernels not in interpreter mode (CUDA present, or imported before TRITON_INTERPRET=1)")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not HAS_CUDA or INTERPRETED, reason="needs CUDA without TRITON_INTERPRET")]),
]
F32_TOL = 2e-3
BF16_TOL = 3e-2  # vs a float32 reference on the same bf16-rounded inputs

# (num_q_heads, num_kv_heads, head_dim, page_size): GQA ratios 1, 3, 4; head dims 64, 128.
CONFIGS = [
    (2, 2, 64, 1),
    (3, 1, 64, 16),
    (4, 1, 128, 16),
    (8, 2, 128, 1),
]
CONFIG_IDS = [f"hq{hq}-hkv{hkv}-d{d}-page{p}" for hq, hkv, d, p in CONFIGS]


class Pool:
    """A KV pool plus block table for requests of the given lengths.

    Slots are handed out a page at a time from shuffled pages (page_size 1: a random permutation);
    requests sit in shuffled rows of req_to_token.  The last page is poison (NaN K/V) and every
    unused req_to_token entry points into it, so a kernel that reads past a request's length
    produces NaN instead of a plausible number.
    """

    def __init__(self, lens, num_kv_heads, head_dim, page_size, dtype, device, gen):
        pages = [-(-n // page_size) for n in lens]
        num_pages = sum(pages) + 3  # 2 spare pages + 1 poison page
        num_slots = num_pages * page_size
        poison = (num_pages - 1) * page_size
        # k_buffer, v_buffer: [num_slots, Hkv, D]
        self.k_buffer = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype)
        self.v_buffer = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype)
        self.k_buffer[poison:] = float("nan")
        self.v_buffer[poison:] = float("nan")
        num_rows, max_context = len(lens) + 2, max(lens) + 8
        self.req_to_token = torch.full((num_rows, max_context), poison, dtype=torch.int32)  # [R, C]
        rows = torch.randperm(num_rows, generator=gen)[:len(lens)]  # [B]
        page_order = torch.randperm(num_pages - 1, generator=gen)  # poison page never handed out
        used = 0
        for row, n, n_pages in zip(rows.tolist(), lens, pages):
            mine = page_order[used:used + n_pages]  # [P]
            used += n_pages
            slots = (mine[:, None] * page_size + torch.arange(page_size)[None, :]).flatten()[:n]  # [n]
            self.req_to_token[row, :n] = slots.to(torch.int32)
        self.req_pool_indices = rows.to(torch.int64)  # [B]
        for name in ("k_buffer", "v_buffer", "req_to_token", "req_pool_indices"):
            setattr(self, name, getattr(self, name).to(device))

    def tables(self):
        return self.k_buffer, self.v_buffer, self.req_to_token, self.req_pool_indices

    def float_tables(self):
        return self.k_buffer.float(), self.v_buffer.float(), self.req_to_token, self.req_pool_indices


def _max_err(out, ref):
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "non-finite output (read past a request's length?)"
    return (out.float() - ref.float()).abs().max().item()


def _decode_case(device, num_q_heads, num_kv_heads, head_dim, page_size, seq_lens, dtype=torch.float32,
                 num_splits=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pool = Pool(seq_lens, num_kv_heads, head_dim, page_size, dtype, device, gen)
    q = torch.randn(len(seq_lens), num_q_heads, head_dim, generator=gen).to(dtype).to(device)  # [B, Hq, D]
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)  # [B]
    scale = head_dim ** -0.5
    out = TRITON.decode_attention(q, *pool.tables(), lens, scale, num_splits=num_splits)
    ref = torch_ref.decode_attention(q.float(), *pool.float_tables(), lens, scale)
    assert out.dtype == dtype
    return _max_err(out, ref)


def _extend_case(device, num_q_heads, num_kv_heads, head_dim, page_size, prefix_lens, extend_lens,
                 dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    totals = [p + e for p, e in zip(prefix_lens, extend_lens)]
    pool = Pool(totals, num_kv_heads, head_dim, page_size, dtype, device, gen)
    q = torch.randn(sum(extend_lens), num_q_heads, head_dim, generator=gen).to(dtype).to(device)  # [T, Hq, D]
    prefix = torch.tensor(prefix_lens, dtype=torch.int32, device=device)  # [B]
    extend = torch.tensor(extend_lens, dtype=torch.int32, device=device)  # [B]
    scale = head_dim ** -0.5
    out = TRITON.extend_attention(q, *pool.tables(), prefix, extend, scale)
    ref = torch_ref.extend_attention(q.float(), *pool.float_tables(), prefix, extend, scale)
    assert out.dtype == dtype
    return _max_err(out, ref)


def _lengths(device, small, large):
    return small + (large if device == "cuda" else [])  # the GPU's 64/128 blocks need longer runs


# ----------------------------------------------------------------------------------- decode

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_decode_matches_reference(device, config):
    seq_lens = _lengths(device, [1, 2, 16, 17, 33, 48], [64, 129, 1000])
    assert _decode_case(device, *config, seq_lens) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_decode_split_counts(device, num_splits):
    # 8 splits of a 5-token request leave most chunks empty; 3 is not a power of two.
    seq_lens = _lengths(device, [5, 40, 1], [700])
    assert _decode_case(device, 6, 2, 64, 16, seq_lens, num_splits=num_splits) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_decode_head_dim_not_power_of_two(device):
    assert _decode_case(device, 4, 2, 96, 1, [3, 20]) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_decode_gqa_8(device):
    assert _decode_case(device, 8, 1, 64, 1, [7, 18]) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_decode_bf16(device):
    assert _decode_case(device, 4, 1, 64, 16, [1, 19, 32], dtype=torch.bfloat16) < BF16_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_decode_writes_into_out(device):
    gen = torch.Generator().manual_seed(3)
    pool = Pool([9, 4], 1, 64, 1, torch.float32, device, gen)
    q = torch.randn(2, 2, 64, generator=gen).to(device)  # [B, Hq, D]
    lens = torch.tensor([9, 4], device=device)  # [B]
    out = torch.full((2, 2, 64), float("nan"), device=device)  # [B, Hq, D]
    got = TRITON.decode_attention(q, *pool.tables(), lens, 0.125, out=out)
    assert got is out
    assert _max_err(out, torch_ref.decode_attention(q, *pool.tables(), lens, 0.125)) < F32_TOL


# ----------------------------------------------------------------------------------- extend

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_extend_mixed_batch_matches_reference(device, config):
    # No prefix, one new token, block multiples, odd sizes, and an idle request in one launch.
    prefix = _lengths(device, [0, 0, 5, 16, 33, 7], [0, 130])
    extend = _lengths(device, [1, 17, 2, 16, 1, 0], [200, 64])
    assert _extend_case(device, *config, prefix, extend) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_extend_with_host_metadata_equals_without(device):
    """max_extend_len and extend_start given by the caller (the step's metadata, no device read) give
    the same output as the kernel computing them itself."""
    gen = torch.Generator().manual_seed(9)
    prefix_lens, extend_lens = [0, 5, 16, 3], [17, 2, 1, 9]
    pool = Pool([p + e for p, e in zip(prefix_lens, extend_lens)], 1, 64, 1, torch.float32, device, gen)
    q = torch.randn(sum(extend_lens), 3, 64, generator=gen).to(device)  # [T, Hq, D]
    prefix = torch.tensor(prefix_lens, device=device)  # [B]
    extend = torch.tensor(extend_lens, device=device)  # [B]
    starts = torch.tensor([0, 17, 19, 20], device=device)  # [B] exclusive cumsum of extend_lens
    plain = TRITON.extend_attention(q, *pool.tables(), prefix, extend, 0.125)
    given = TRITON.extend_attention(q, *pool.tables(), prefix, extend, 0.125, max_extend_len=17, extend_start=starts)
    assert torch.equal(plain, given)
    assert _max_err(given, torch_ref.extend_attention(q, *pool.tables(), prefix, extend, 0.125)) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_extend_no_prefix_single_request(device):
    assert _extend_case(device, 4, 1, 64, 1, [0], [33]) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_extend_one_token_each_equals_decode(device):
    # Extending by one token after a prefix is a decode step over prefix + 1 keys.
    gen = torch.Generator().manual_seed(5)
    prefix_lens, head_dim = [0, 4, 31], 64
    pool = Pool([p + 1 for p in prefix_lens], 1, head_dim, 16, torch.float32, device, gen)
    q = torch.randn(3, 3, head_dim, generator=gen).to(device)  # [B, Hq, D]
    prefix = torch.tensor(prefix_lens, device=device)  # [B]
    ones = torch.ones(3, dtype=torch.int64, device=device)  # [B]
    ext = TRITON.extend_attention(q, *pool.tables(), prefix, ones, 0.125)
    dec = TRITON.decode_attention(q, *pool.tables(), prefix + 1, 0.125)
    assert _max_err(ext, dec) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_extend_head_dim_not_power_of_two(device):
    assert _extend_case(device, 2, 1, 96, 1, [3, 0], [5, 18]) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_extend_bf16(device):
    assert _extend_case(device, 4, 1, 64, 16, [0, 21], [18, 3], dtype=torch.bfloat16) < BF16_TOL


# ----------------------------------------------------------------------------------- store_kv

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("buffer_dtype", [torch.float32, torch.bfloat16])
def test_store_kv_matches_reference(device, buffer_dtype):
    gen = torch.Generator().manual_seed(7)
    num_slots, num_kv_heads, head_dim = 64, 2, 64
    page = torch.randperm(num_slots // 16, generator=gen)[0].item()
    loc = torch.cat([torch.arange(page * 16, page * 16 + 16), torch.tensor([3, 61, 40])]).to(device)  # [T]
    qkv = torch.randn(loc.numel(), 3, num_kv_heads, head_dim, generator=gen).to(device)  # [T, 3, Hkv, D]
    k, v = qkv[:, 1], qkv[:, 2]  # [T, Hkv, D] non-contiguous views, as after a fused QKV projection
    bufs = [torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(buffer_dtype).to(device)
            for _ in range(2)]  # k_buffer, v_buffer: [num_slots, Hkv, D]
    ref = [b.clone() for b in bufs]
    TRITON.store_kv(bufs[0], bufs[1], loc, k, v)
    torch_ref.store_kv(ref[0], ref[1], loc, k, v)
    assert torch.equal(bufs[0], ref[0]) and torch.equal(bufs[1], ref[1])


@pytest.mark.parametrize("device", DEVICES)
def test_store_then_extend_reads_new_tokens_from_pool(device):
    # End to end: new tokens' K/V go through store_kv, then extend reads them from the pool.
    gen = torch.Generator().manual_seed(11)
    pool = Pool([9, 20], 1, 64, 1, torch.float32, device, gen)
    prefix_lens, extend_lens = [4, 0], [5, 20]
    locs = torch.cat([pool.req_to_token[row, p:p + e] for row, p, e in
                      zip(pool.req_pool_indices.tolist(), prefix_lens, extend_lens)])  # [T]
    new_k = torch.randn(locs.numel(), 1, 64, generator=gen).to(device)  # [T, Hkv, D]
    new_v = torch.randn(locs.numel(), 1, 64, generator=gen).to(device)  # [T, Hkv, D]
    TRITON.store_kv(pool.k_buffer, pool.v_buffer, locs, new_k, new_v)
    q = torch.randn(locs.numel(), 2, 64, generator=gen).to(device)  # [T, Hq, D]
    args = (*pool.tables(), torch.tensor(prefix_lens, device=device),
            torch.tensor(extend_lens, device=device), 0.125)
    assert _max_err(TRITON.extend_attention(q, *args), torch_ref.extend_attention(q, *args)) < F32_TOL


# ----------------------------------------------------------------------------------- dispatch

def test_dispatch_auto_on_cpu_uses_the_native_extend_or_the_torch_reference():
    from radixlm.kernels import cpu_extend

    ops = dispatch.get_attention_ops("auto", "cpu")
    assert ops.store_kv is torch_ref.store_kv
    if ops.name == "cpu":          # native kernels built: short extends batched through the decode kernel
        assert ops.extend_attention is cpu_extend.extend_attention
    else:
        assert ops.name == "torch" and ops.extend_attention is torch_ref.extend_attention


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.gpu
def test_dispatch_auto_picks_triton_on_cuda():
    assert dispatch.get_attention_ops("auto", "cuda").name == "triton"


def test_dispatch_forced_backends():
    assert dispatch.get_attention_ops("torch", "cuda").name == "torch"
    with pytest.raises(ValueError, match="unknown attention backend"):
        dispatch.get_attention_ops("flash", "cpu")


def test_dispatch_triton_on_cpu_needs_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        dispatch.get_attention_ops("triton", "cpu")
    if INTERPRETED:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert dispatch.get_attention_ops("triton", "cpu").name == "triton"


# ----------------------------------------------------------------------------------- split choice, tiles, configs

def test_num_splits_follow_the_work():
    from radixlm.kernels.triton_decode import MAX_SPLITS, choose_num_splits

    sms = 132  # an H200
    assert choose_num_splits(1, 8, sms, max_seq_len=512, min_chunk=256) == 2      # short: few chunks
    assert choose_num_splits(1, 8, sms, max_seq_len=200, min_chunk=256) == 1      # one launch
    assert choose_num_splits(1, 8, sms) == MAX_SPLITS                             # unknown length: fill the card
    assert choose_num_splits(1, 8, sms, max_seq_len=32768, min_chunk=256) == MAX_SPLITS
    assert choose_num_splits(32, 8, sms, max_seq_len=8192, min_chunk=256) == 2    # 256 programs already
    assert choose_num_splits(256, 8, sms, max_seq_len=8192, min_chunk=256) == 1
    for b in (1, 3, 7, 64):
        n = choose_num_splits(b, 4, sms, max_seq_len=5000, min_chunk=256)
        assert n & (n - 1) == 0 and 1 <= n <= MAX_SPLITS


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_seq_len", [None, "exact"])
def test_decode_default_splits_short_contexts(device, max_seq_len):
    """B=1 and small batches with the default split choice (one launch where the work is small)."""
    from radixlm.kernels import triton_decode as td

    for hq, hkv, d, lens in [(8, 1, 128, [5]), (32, 8, 64, [40]), (16, 4, 128, [3, 70]), (8, 2, 64, [1, 1, 2])]:
        lens = _lengths(device, lens, [512] if len(lens) == 1 else [])
        gen = torch.Generator().manual_seed(len(lens))
        pool = Pool(lens, hkv, d, 16, torch.float32, device, gen)
        q = torch.randn(len(lens), hq, d, generator=gen).to(device)  # [B, Hq, D]
        t = torch.tensor(lens, dtype=torch.int32, device=device)  # [B]
        kw = {"max_seq_len": max(lens)} if max_seq_len else {}
        out = TRITON.decode_attention(q, *pool.tables(), t, d ** -0.5, **kw)
        assert _max_err(out, torch_ref.decode_attention(q, *pool.tables(), t, d ** -0.5)) < F32_TOL
        assert td.default_num_splits(len(lens), hkv, device, max(lens), d) >= 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("min_chunk", [16, 48])
def test_decode_min_chunk_uneven_splits(device, min_chunk):
    """A device-side minimum chunk longer than seq_len / num_splits: requests use different chunk counts."""
    from radixlm.kernels.triton_decode import DecodeConfig

    cfg = DecodeConfig(16, 1, 1, min_chunk) if device == "cpu" else DecodeConfig(64, 4, 2, 4 * min_chunk)
    gen = torch.Generator().manual_seed(min_chunk)
    lens = [1, 47, 48, 49, 200] + ([777, 2000] if device == "cuda" else [])
    pool = Pool(lens, 2, 64, 16, torch.float32, device, gen)
    q = torch.randn(len(lens), 8, 64, generator=gen).to(device)  # [B, Hq, D]
    t = torch.tensor(lens, device=device)  # [B]
    for splits in (2, 4, 32):
        out = TRITON.decode_attention(q, *pool.tables(), t, 0.125, num_splits=splits, config=cfg)
        assert _max_err(out, torch_ref.decode_attention(q, *pool.tables(), t, 0.125)) < F32_TOL


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group", [4, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_and_extend_gqa_head_dims(device, group, head_dim):
    seq = _lengths(device, [1, 17, 33], [300, 1024])
    assert _decode_case(device, 2 * group, 2, head_dim, 16, seq, dtype=torch.bfloat16) < BF16_TOL
    prefix = _lengths(device, [0, 17, 5], [64, 1000])
    extend = _lengths(device, [33, 1, 16], [129, 200])
    assert _extend_case(device, 2 * group, 2, head_dim, 16, prefix, extend, dtype=torch.bfloat16) < BF16_TOL


def _extend_configs(device):
    from radixlm.kernels import triton_extend as te

    if device == "cpu":
        return [te.ExtendConfig(16, 16, 1, 1), te.ExtendConfig(32, 16, 1, 1), te.ExtendConfig(32, 8, 1, 1),
                te.ExtendConfig(32, 16, 1, 1, 1), te.ExtendConfig(16, 8, 1, 1, 2)]
    return sorted({c for k, c in te.EXTEND_CONFIGS.items() if k[0] == "sm90" and k[1] <= 128}, key=str)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [(8, 2), (12, 2)], ids=["gqa4", "gqa6"])
def test_extend_tile_edges(device, heads):
    """Extend lengths off and on BLOCK_M multiples, prefixes off and on BLOCK_N multiples, for every
    config the tables or the tuner can pick: the causal diagonal, the skipped tiles above it and the
    prefix's partial tile; GQA heads packed per program (4, 2 for a group of 6, 1) or not."""
    if device == "cpu":
        prefix, extend = [0, 1, 15, 16, 17, 33, 8, 0], [1, 15, 16, 17, 31, 32, 33, 65]
    else:
        prefix, extend = [0, 1, 63, 64, 65, 130, 0, 257], [1, 63, 64, 65, 127, 128, 129, 300]
    dtype, tol = (torch.float32, F32_TOL) if device == "cpu" else (torch.bfloat16, BF16_TOL)  # GPU tiles: bf16
    gen = torch.Generator().manual_seed(21)
    pool = Pool([p + e for p, e in zip(prefix, extend)], heads[1], 64, 16, dtype, device, gen)
    q = torch.randn(sum(extend), heads[0], 64, generator=gen).to(dtype).to(device)  # [T, Hq, D]
    pl, el = torch.tensor(prefix, device=device), torch.tensor(extend, device=device)  # [B]
    ref = torch_ref.extend_attention(q.float(), *pool.float_tables(), pl, el, 0.125)
    for cfg in _extend_configs(device):
        out = TRITON.extend_attention(q, *pool.tables(), pl, el, 0.125, config=cfg)
        assert _max_err(out, ref) < tol, cfg


@pytest.mark.parametrize("device", DEVICES)
def test_extend_default_config_classes(device, monkeypatch):
    """The table's small, medium and large shape classes (chosen from max_extend_len) on one batch each
    (on the interpreter with a lower medium/large boundary: 1,025 tokens take too long there)."""
    from radixlm.kernels import triton_extend as te

    if device == "cpu":
        monkeypatch.setattr(te, "MEDIUM_EXTEND", 80)

    for ext in ([3, 1, te.SMALL_EXTEND], [te.SMALL_EXTEND + 1, 7], [te.MEDIUM_EXTEND + 1, 2]):
        assert _extend_case(device, 4, 1, 128, 16, [5, 0, 19][:len(ext)], ext, dtype=torch.bfloat16) < BF16_TOL


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA or INTERPRETED, reason="needs CUDA without TRITON_INTERPRET")
def test_extend_candidates_match_reference():
    """Every config the tuner may put in the table (compiles each: the slowest gpu test here)."""
    from radixlm.kernels.triton_extend import EXTEND_CANDIDATES

    gen = torch.Generator().manual_seed(8)
    prefix, extend = [0, 65, 300], [257, 1, 130]
    pool = Pool([p + e for p, e in zip(prefix, extend)], 2, 128, 16, torch.bfloat16, "cuda", gen)
    q = torch.randn(sum(extend), 8, 128, generator=gen).to(torch.bfloat16).cuda()  # [T, Hq, D]
    pl, el = torch.tensor(prefix, device="cuda"), torch.tensor(extend, device="cuda")  # [B]
    ref = torch_ref.extend_attention(q.float(), *pool.float_tables(), pl, el, 0.09)
    for cfg in EXTEND_CANDIDATES:
        out = TRITON.extend_attention(q, *pool.tables(), pl, el, 0.09, config=cfg)
        assert _max_err(out, ref) < BF16_TOL, cfg


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA or INTERPRETED, reason="needs CUDA without TRITON_INTERPRET")
def test_decode_candidates_match_reference():
    from radixlm.kernels.triton_decode import DECODE_CANDIDATES

    gen = torch.Generator().manual_seed(4)
    lens = [1, 100, 513, 4097]
    pool = Pool(lens, 2, 128, 16, torch.bfloat16, "cuda", gen)
    q = torch.randn(len(lens), 8, 128, generator=gen).to(torch.bfloat16).cuda()  # [B, Hq, D]
    t = torch.tensor(lens, device="cuda")  # [B]
    ref = torch_ref.decode_attention(q.float(), *pool.float_tables(), t, 0.09)
    for cfg in DECODE_CANDIDATES:
        for splits in (None, 1, 8):
            out = TRITON.decode_attention(q, *pool.tables(), t, 0.09, num_splits=splits, config=cfg)
            assert _max_err(out, ref) < BF16_TOL, (cfg, splits)


# ----------------------------------------------------------------------------------- warm-up

def _warm_names():
    return {"store_kv", "decode single", "decode split+merge", "extend small", "extend medium", "extend large",
            "kv blocks from pool", "kv blocks to pool"}


@pytest.mark.parametrize("device", DEVICES)
def test_warm_up_launches_every_variant(device, monkeypatch):
    from radixlm.kernels import triton_extend, triton_warmup

    if device == "cpu":
        monkeypatch.setattr(triton_extend, "MEDIUM_EXTEND", 80)  # the interpreter is slow on 1,025 tokens
    large = triton_extend.MEDIUM_EXTEND + 1
    done = triton_warmup.warm_up_triton(device, torch.bfloat16, 8, 2, 64, num_layers=2, max_context=large + 16)
    assert set(done) == _warm_names()
    short = triton_warmup.warm_up_triton(device, torch.bfloat16, 8, 2, 64, num_layers=2, max_context=large)
    assert set(short) == _warm_names() - {"extend large"}  # no request of `large` new tokens fits a row


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA or INTERPRETED, reason="needs CUDA without TRITON_INTERPRET")
def test_warm_up_leaves_nothing_to_compile():
    """After warm_up_triton, server-shaped calls of every kind (batch sizes, split counts, short and long
    extends, fused-QKV views, the KV tiers' copies) compile no new kernel."""
    from radixlm.kernels import triton_decode as td
    from radixlm.kernels import triton_extend as te
    from radixlm.kernels import triton_kv_blocks as tk
    from radixlm.kernels import triton_store as ts
    from radixlm.kernels import triton_warmup

    hq, hkv, d, layers, ctx, dev = 32, 8, 128, 3, 2048, torch.device("cuda")
    triton_warmup.warm_up_triton(dev, torch.bfloat16, hq, hkv, d, num_layers=layers, max_context=ctx)
    kernels = [td._decode_split_kernel, td._decode_merge_kernel, te._extend_kernel, ts._store_kv_kernel,
               tk._kv_blocks_kernel]

    def compiled():
        return [sum(len(c[0]) for c in k.device_caches.values()) for k in kernels]

    before = compiled()
    gen = torch.Generator().manual_seed(2)
    slots = 8192
    kb = torch.randn(slots, hkv, d, generator=gen).to(torch.bfloat16).cuda()  # [S, Hkv, D]
    vb = torch.randn_like(kb)  # [S, Hkv, D]
    table = torch.randperm(4 * ctx, generator=gen)[:4 * ctx].remainder(slots).to(torch.int32).view(4, ctx).cuda()
    for bsz in (1, 3, 32, 160):
        qkv = torch.randn(bsz, (hq + 2 * hkv) * d, generator=gen).to(torch.bfloat16).cuda()  # [B, (Hq+2Hkv)D]
        q = qkv[:, :hq * d].view(bsz, hq, d)  # [B, Hq, D] a fused projection's view
        k = qkv[:, hq * d:(hq + hkv) * d].view(bsz, hkv, d)  # [B, Hkv, D]
        loc = torch.randperm(slots, generator=gen)[:bsz].cuda()  # [B] int64
        ts.store_kv(kb, vb, loc, k, k)
        rows = torch.randint(0, 4, (bsz,), generator=gen).cuda()  # [B]
        lens = torch.randint(1, ctx, (bsz,), generator=gen).cuda()  # [B]
        for splits in (None, 1, 2, 7, 32):
            td.decode_attention(q, kb, vb, table, rows, lens, 0.1, num_splits=splits)
        te.extend_attention(q, kb, vb, table, rows, lens - 1, torch.ones_like(lens), 0.1, max_extend_len=1)
    for ext in (5, 64, 65, 1000, 1300):
        qe = torch.randn(2 * ext, hq, d, generator=gen).to(torch.bfloat16).cuda()  # [T, Hq, D]
        el = torch.tensor([ext, ext]).cuda()  # [B]
        te.extend_attention(qe, kb, vb, table, torch.tensor([0, 2]).cuda(), torch.tensor([0, 700]).cuda(), el, 0.1,
                            max_extend_len=ext, extend_start=torch.tensor([0, ext]).cuda())
    bufs = [torch.zeros(256, hkv, d, dtype=torch.bfloat16, device=dev) for _ in range(2 * layers)]  # [S, H, D]
    for n in (1, 3):
        staged = torch.empty(n, 2 * layers, 64, hkv, d, dtype=torch.bfloat16, device=dev)  # [n, 2L, 64, H, D]
        idx = torch.randperm(256)[:64 * n].cuda()  # [n * 64]
        tk.kv_blocks_copy(staged, bufs, idx, 64, False)
        tk.kv_blocks_copy(staged, bufs, idx, 64, True)
    torch.cuda.synchronize()
    assert compiled() == before


def test_pack_heads():
    from radixlm.kernels.triton_extend import pack_heads

    assert [pack_heads(g, 128, 8) for g in (1, 2, 3, 4, 6, 8, 16)] == [1, 2, 1, 4, 2, 8, 8]
    assert pack_heads(8, 4, 8) == 4 and pack_heads(8, 128, 1) == 1
