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
