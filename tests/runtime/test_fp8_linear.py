"""FP8 weights (runtime/models/fp8_linear.py): quantization, the FP8 product, and their error bounds.

The bounds are derived from e4m3 (3 mantissa bits): rounding to nearest keeps an element within 2^-4 of
its value where value / scale is in e4m3's normal range (>= 2^-6), and within 2^-10 scale (half the
subnormal spacing 2^-9) below it.  torch's CPU build has torch._scaled_mm for e4m3, so the GPU's code path
(activations quantized per row, x_q @ w_q^T * s_x * s_w) runs here too.
"""

import pytest
import torch
import torch.nn.functional as F

from radixlm.runtime.models.fp8_linear import E4M3, E4M3_MAX, Fp8Weight, fp8_linear, quantize_rows
from radixlm.runtime.models.packed_linear import linear

REL = 2.0 ** -4   # e4m3 rounding, relative, normal range
SUB = 2.0 ** -10  # e4m3 rounding below the normal range, in units of the scale


def element_bound(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Largest |q(x / scale) * scale - x| allowed per element; scale broadcasts over x's rows."""
    return torch.maximum(REL * x.abs(), SUB * scale)


def weights(n=96, k=80, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.logspace(-3, 1, n)[:, None]  # [N, K] rows of very different sizes
    w[3, 7] = 0.0
    return w


def test_quantize_dequantize_within_e4m3_rounding():
    w = weights()
    q = Fp8Weight.from_dense(w)
    assert q.weight.dtype == E4M3 and q.scale.shape == (96,)
    err = (q.dequantize() - w).abs()
    assert bool((err <= element_bound(w, q.scale[:, None])).all()), err.max()
    # each row's largest element is e4m3's largest value: the scale is the row's amax / 448, not a global one
    assert torch.equal(q.weight.float().abs().amax(1), torch.full((96,), E4M3_MAX))


def test_dropping_a_scale_breaks_the_bound():
    """The same check fails when any one channel's scale is lost (read as 1) or another channel's is used."""
    w = weights()
    q = Fp8Weight.from_dense(w)
    for broken in (torch.ones_like(q.scale), q.scale.roll(1)):
        q2 = Fp8Weight.from_dense(w)
        q2.scale.copy_(broken)
        assert not bool(((q2.dequantize() - w).abs() <= element_bound(w, q.scale[:, None])).all())


def test_block_scaled_dequantize():
    """[bn, bk] blocks, N and K not multiples of the block: each element takes its block's scale."""
    w = weights(50, 40)  # [N, K]
    q = Fp8Weight(50, 40, block=(16, 16))
    assert q.scale.shape == (4, 3)
    for bi in range(4):
        for bj in range(3):
            blk = w[bi * 16:(bi + 1) * 16, bj * 16:(bj + 1) * 16]
            s = blk.abs().max().clamp(min=1e-12) / E4M3_MAX
            q.scale[bi, bj] = s
            q.weight[bi * 16:(bi + 1) * 16, bj * 16:(bj + 1) * 16] = (blk / s).to(E4M3)
    scale = q.scale.repeat_interleave(16, 0)[:50].repeat_interleave(16, 1)[:, :40]  # [N, K]
    assert bool(((q.dequantize() - w).abs() <= element_bound(w, scale)).all())
    q.scale[1, 2] *= 2  # one block's scale wrong: only that block moves
    moved = (q.dequantize() - w).abs() > element_bound(w, scale)
    assert moved[16:32, 32:].any() and not moved[:16].any() and not moved[:, :32].any()


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_scaled_mm_product_within_derived_bound(out_dtype):
    """fp8_linear (scaled_mm mode) against x @ dequantize(w)^T in float64: the activations' rounding gives
    |err| <= sum_k max(2^-4 |x_k|, 2^-10 s_x) |w_k|; plus float32 accumulation (K 2^-24 sum |x||w|) and, for a
    bfloat16 output, its rounding (2^-8 |y|)."""
    w = Fp8Weight.from_dense(weights(), mode="scaled_mm")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 80, generator=g) * torch.logspace(-2, 2, 7)[:, None]  # [M, K]
    x[2, :40] *= 1e-4  # elements far below the row's amax: e4m3's subnormal range
    wd = w.dequantize(torch.float64)  # [N, K]
    ref = x.double() @ wd.T  # [M, N]
    _, sx = quantize_rows(x)  # [M, 1]
    act = element_bound(x, sx).double() @ wd.abs().T  # [M, N]
    acc = 80 * 2.0 ** -24 * ((x.abs().double() * (1 + REL)) @ wd.abs().T)
    out_round = (2.0 ** -8 if out_dtype == torch.bfloat16 else 2.0 ** -24) * ref.abs()
    got = fp8_linear(x.to(out_dtype), w).double()  # [M, N]
    if out_dtype == torch.bfloat16:  # the input's own rounding to bfloat16: 2^-9 |x_k|
        act = act + 2.0 ** -9 * (x.abs().double() @ wd.abs().T)
    bound = act + acc + out_round
    assert bool(((got - ref).abs() <= bound).all()), ((got - ref).abs() / bound).max()
    # the activations are really quantized: the product differs from the weight-only one
    assert (got - (x.to(out_dtype).double() @ wd.T)).abs().max() > 0


def test_dequant_mode_is_the_dense_product_and_linear_dispatches():
    w = weights()
    q = Fp8Weight.from_dense(w)  # dequant mode (no FP8 product on a CPU by default)
    assert q.mode == "dequant"
    x = torch.randn(5, 80)  # [M, K]
    b = torch.randn(96)  # [N]
    torch.testing.assert_close(linear(x, q, b), F.linear(x, q.dequantize(), b), rtol=0, atol=0)
    assert linear(x[:0], q).shape == (0, 96)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scaled_mm_on_cuda_within_derived_bound():
    """On a GPU of compute capability 8.9+ the layer picks torch._scaled_mm; the same bound as on the CPU holds
    for an 8B-sized product (bfloat16 in and out)."""
    from radixlm.runtime.models.fp8_linear import choose_mode, scaled_mm_available
    if not scaled_mm_available("cuda"):
        pytest.skip("torch._scaled_mm needs compute capability 8.9+")
    assert choose_mode("cuda", 6144, 4096) == "scaled_mm" and choose_mode("cuda", 6144, 4100) == "dequant"
    g = torch.Generator(device="cuda").manual_seed(0)
    dense = torch.randn(6144, 4096, generator=g, device="cuda") * 0.02  # [N, K]
    w = Fp8Weight.from_dense(dense.bfloat16(), "scaled_mm")
    x = torch.randn(37, 4096, generator=g, device="cuda").bfloat16()  # [M, K]
    wd = w.dequantize(torch.float64)  # [N, K]
    ref = x.double() @ wd.T  # [M, N]
    _, sx = quantize_rows(x)  # [M, 1]
    bound = (element_bound(x.float(), sx).double() @ wd.abs().T + 2.0 ** -8 * ref.abs()
             + 4096 * 2.0 ** -23 * (x.abs().double() @ wd.abs().T))
    got = fp8_linear(x, w).double()
    assert bool(((got - ref).abs() <= bound).all()), ((got - ref).abs() / bound).max()


def test_block_weights_never_use_the_scaled_product():
    assert Fp8Weight(32, 32, block=(16, 16), mode="scaled_mm").mode == "dequant"
    with pytest.raises(ValueError, match="mode"):
        Fp8Weight(32, 32, mode="int4")
