"""FP8 (e4m3) KV cache: the Triton store, decode and extend kernels against the torch reference.

The pool holds K / k_scale and V / v_scale in float8_e4m3fn (one scale per layer for each, per tensor);
both the kernels and the reference read element * scale.  The Triton interpreter loads and widens e4m3
(checked here), so these run on the CPU under TRITON_INTERPRET=1 like tests/kernels/test_triton_attention.py;
the `gpu` variants run them compiled.  Scales other than 1 (0.5 for K, 3 for V) make a dropped or swapped
scale fail: a lost k_scale doubles every score, a lost v_scale divides the output by 3.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

pytest.importorskip("triton")

from test_triton_attention import BF16_TOL, F32_TOL, HAS_CUDA, INTERPRETED, TRITON, Pool, _max_err  # noqa: E402

from radixlm.kernels import torch_ref  # noqa: E402
from radixlm.kernels.torch_ref import E4M3, from_kv, to_kv  # noqa: E402

K_SCALE, V_SCALE = 0.5, 3.0
DEVICES = [  # as in test_triton_attention.py
    pytest.param("cpu", marks=pytest.mark.skipif(not INTERPRETED, reason="kernels not in interpreter mode")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not HAS_CUDA or INTERPRETED, reason="needs CUDA without TRITON_INTERPRET")]),
]


def _fp8_pool(lens, hkv, d, page, device, gen):
    """test_triton_attention.Pool (NaN poison page included) with its K/V stored as e4m3 with the scales."""
    pool = Pool(lens, hkv, d, page, torch.float32, "cpu", gen)
    pool.k_buffer = to_kv(pool.k_buffer, E4M3, K_SCALE).to(device)  # [S, Hkv, D] e4m3
    pool.v_buffer = to_kv(pool.v_buffer, E4M3, V_SCALE).to(device)
    pool.req_to_token, pool.req_pool_indices = pool.req_to_token.to(device), pool.req_pool_indices.to(device)
    return pool


@pytest.mark.parametrize("device", DEVICES)
def test_store_quantizes_like_the_reference_within_e4m3_rounding(device):
    gen = torch.Generator().manual_seed(0)
    k = (torch.randn(6, 2, 64, generator=gen) * 4).to(device)  # [T, Hkv, D]
    v = (torch.randn(6, 2, 64, generator=gen) * 4).to(device)
    k[0, 0, 0], v[1, 1, 3] = 1e4, -1e4  # past e4m3's range: clamped, never NaN
    loc = torch.tensor([9, 2, 5, 0, 7, 11], device=device)  # [T]
    bufs = [torch.zeros(12, 2, 64, device=device, dtype=E4M3) for _ in range(4)]  # [S, Hkv, D] each
    TRITON.store_kv(bufs[0], bufs[1], loc, k, v, k_scale=K_SCALE, v_scale=V_SCALE)
    torch_ref.store_kv(bufs[2], bufs[3], loc, k, v, k_scale=K_SCALE, v_scale=V_SCALE)
    assert torch.equal(bufs[0].view(torch.uint8), bufs[2].view(torch.uint8))
    assert torch.equal(bufs[1].view(torch.uint8), bufs[3].view(torch.uint8))
    for buf, x, scale in ((bufs[0], k, K_SCALE), (bufs[1], v, V_SCALE)):
        back = from_kv(buf[loc.long()], torch.float32, scale)  # [T, Hkv, D]
        assert torch.isfinite(back).all()
        inside = x.abs() <= 448 * scale
        bound = torch.maximum(2.0 ** -4 * x.abs(), torch.full_like(x, 2.0 ** -10 * scale))
        assert bool(((back - x).abs() <= bound)[inside].all())
        assert torch.equal(back[~inside].abs(), torch.full_like(back[~inside], 448 * scale))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, F32_TOL), (torch.bfloat16, BF16_TOL)])
@pytest.mark.parametrize("hq,hkv,d,page", [(4, 1, 64, 16), (8, 2, 128, 1)])
def test_decode_reads_fp8_kv(device, dtype, tol, hq, hkv, d, page):
    gen = torch.Generator().manual_seed(1)
    lens = [1, 37, 70] + ([300, 1030] if device == "cuda" else [])
    pool = _fp8_pool(lens, hkv, d, page, device, gen)
    q = torch.randn(len(lens), hq, d, generator=gen).to(dtype).to(device)  # [B, Hq, D]
    seq = torch.tensor(lens, dtype=torch.int32, device=device)  # [B]
    ref = torch_ref.decode_attention(q.float(), *pool.tables(), seq, d ** -0.5, k_scale=K_SCALE, v_scale=V_SCALE)
    for splits in (1, 4):
        out = TRITON.decode_attention(q, *pool.tables(), seq, d ** -0.5, num_splits=splits, k_scale=K_SCALE,
                                      v_scale=V_SCALE)
        assert out.dtype == dtype and _max_err(out, ref) < tol, splits
    dropped = TRITON.decode_attention(q, *pool.tables(), seq, d ** -0.5, k_scale=1.0, v_scale=V_SCALE)
    assert _max_err(dropped, ref) > 10 * tol  # the check sees a lost k_scale


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, F32_TOL), (torch.bfloat16, BF16_TOL)])
@pytest.mark.parametrize("hq,hkv,d,page", [(3, 1, 64, 16), (8, 2, 128, 1)])
def test_extend_reads_fp8_kv(device, dtype, tol, hq, hkv, d, page):
    gen = torch.Generator().manual_seed(2)
    prefix, ext = [0, 19, 40], [7, 1, 33]
    pool = _fp8_pool([p + e for p, e in zip(prefix, ext)], hkv, d, page, device, gen)
    q = torch.randn(sum(ext), hq, d, generator=gen).to(dtype).to(device)  # [T, Hq, D]
    p_t = torch.tensor(prefix, dtype=torch.int32, device=device)  # [B]
    e_t = torch.tensor(ext, dtype=torch.int32, device=device)  # [B]
    ref = torch_ref.extend_attention(q.float(), *pool.tables(), p_t, e_t, d ** -0.5, k_scale=K_SCALE, v_scale=V_SCALE)
    out = TRITON.extend_attention(q, *pool.tables(), p_t, e_t, d ** -0.5, k_scale=K_SCALE, v_scale=V_SCALE)
    assert out.dtype == dtype and _max_err(out, ref) < tol
    dropped = TRITON.extend_attention(q, *pool.tables(), p_t, e_t, d ** -0.5, k_scale=K_SCALE, v_scale=1.0)
    assert _max_err(dropped, ref) > 10 * tol  # the check sees a lost v_scale


def test_reference_reads_fp8_as_the_dequantized_pool():
    """The torch reference on an e4m3 pool equals itself on that pool dequantized to float32 (its oracle)."""
    gen = torch.Generator().manual_seed(3)
    pool = _fp8_pool([5, 23], 2, 64, 1, "cpu", gen)
    k_f = from_kv(pool.k_buffer, torch.float32, K_SCALE)  # [S, Hkv, D]
    v_f = from_kv(pool.v_buffer, torch.float32, V_SCALE)
    q = torch.randn(2, 4, 64, generator=gen)  # [B, Hq, D]
    seq = torch.tensor([5, 23])
    got = torch_ref.decode_attention(q, *pool.tables(), seq, 0.125, k_scale=K_SCALE, v_scale=V_SCALE)
    want = torch_ref.decode_attention(q, k_f, v_f, pool.req_to_token, pool.req_pool_indices, seq, 0.125)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_with_window_softcap_and_fp8_kv_together(device):
    """Gemma 2 with --kv-cache-dtype fp8_e4m3: one launch carries a window, a soft-cap and the e4m3 scales.
    Dropping any of the three moves the output far past the tolerance."""
    gen = torch.Generator().manual_seed(4)
    lens, window, cap, d = [1, 9, 40], 12, 0.5, 64
    pool = _fp8_pool(lens, 2, d, 1, device, gen)
    q = (torch.randn(len(lens), 4, d, generator=gen) * 4).to(device)  # [B, Hq, D] scores past the cap
    seq = torch.tensor(lens, dtype=torch.int32, device=device)  # [B]
    both = {"window": window, "softcap": cap, "k_scale": K_SCALE, "v_scale": V_SCALE}
    ref = torch_ref.decode_attention(q, *pool.tables(), seq, d ** -0.5, **both)
    for splits in (1, 4):
        out = TRITON.decode_attention(q, *pool.tables(), seq, d ** -0.5, num_splits=splits, **both)
        assert _max_err(out, ref) < F32_TOL, splits
    for dropped in ({"window": None}, {"softcap": None}, {"k_scale": 1.0}):
        out = TRITON.decode_attention(q, *pool.tables(), seq, d ** -0.5, **{**both, **dropped})
        assert _max_err(out, ref) > 10 * F32_TOL, dropped


@pytest.mark.parametrize("device", DEVICES)
def test_extend_with_window_softcap_and_fp8_kv_together(device):
    """The extend's masked walk (_attend_window_tile) over e4m3 K/V, with a prefix past the window."""
    gen = torch.Generator().manual_seed(5)
    prefix, ext, window, cap, d = [0, 30], [9, 20], 8, 0.5, 64
    pool = _fp8_pool([p + e for p, e in zip(prefix, ext)], 1, d, 1, device, gen)
    q = (torch.randn(sum(ext), 3, d, generator=gen) * 4).to(device)  # [T, Hq, D]
    p_t = torch.tensor(prefix, dtype=torch.int32, device=device)  # [B]
    e_t = torch.tensor(ext, dtype=torch.int32, device=device)  # [B]
    both = {"window": window, "softcap": cap, "k_scale": K_SCALE, "v_scale": V_SCALE}
    ref = torch_ref.extend_attention(q, *pool.tables(), p_t, e_t, d ** -0.5, **both)
    assert _max_err(TRITON.extend_attention(q, *pool.tables(), p_t, e_t, d ** -0.5, **both), ref) < F32_TOL
    for dropped in ({"window": None}, {"softcap": None}, {"v_scale": 1.0}):
        out = TRITON.extend_attention(q, *pool.tables(), p_t, e_t, d ** -0.5, **{**both, **dropped})
        assert _max_err(out, ref) > 10 * F32_TOL, dropped
