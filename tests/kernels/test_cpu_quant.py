"""The quantized linear kernels (radixlm_kernels/csrc/cpu_quant_linear.c) against the float product of their own
weights dequantized by the gguf package, on every ISA path this machine can run.

The bound is derived from what the kernels do: they quantize each block of 32 activations to int8 with the scale
d = max|x| / 127 and round to nearest, so every activation moves by at most d / 2; the weights are used exactly
(integer dot products, then the blocks' float scales).  An output therefore differs from W x by at most
  sum over blocks b of (d_b / 2) * sum_{k in b} |W[n, k]|
plus float32 rounding of the block sums, at most 2 gamma_K times sum_k |W[n, k]| (|x_k| + d_b / 2).  A dropped
scale, a wrong nibble order or a missing offset is off by the weights' own size, far past that bound.
"""

import pytest
import torch

from radixlm.kernels import cpu_quant

FORMATS = list(cpu_quant.FORMATS)
NATIVE_ISAS = ("vnni", "avx2", "scalar")


def _isa_or_skip(isa: str) -> str:
    reason = cpu_quant.isa_supported(isa)
    if reason:
        pytest.skip(f"{isa} path not runnable here: {reason}")
    return isa


def random_blocks(fmt: str, n: int, k: int, g: torch.Generator) -> torch.Tensor:
    """uint8 [N, row_bytes] of random valid blocks: random quants and scale bytes, float16 block scales set to
    sizes a trained model has (a random float16 could be inf or nan)."""
    _, block, size = cpu_quant.FORMATS[fmt]
    w = torch.randint(0, 256, (n, k // block, size), generator=g, dtype=torch.uint8)  # [N, blocks, size]

    def put(offset: int, scale: float) -> None:
        h = ((torch.rand(n, k // block, generator=g) + 0.25) * scale).to(torch.float16)  # [N, blocks]
        w[:, :, offset:offset + 2] = h.view(torch.uint8).reshape(n, k // block, 2)

    offsets = {"Q8_0": [(0, 0.01)], "Q4_0": [(0, 0.01)], "Q4_1": [(0, 0.01), (2, -0.05)], "Q5_0": [(0, 0.01)],
               "Q4_K": [(0, 0.001), (2, 0.002)], "Q6_K": [(208, 0.0005)]}[fmt]
    for offset, scale in offsets:
        put(offset, scale)
    return w.reshape(n, -1)  # [N, row_bytes]


def _reference_and_bound(x: torch.Tensor, w_float: torch.Tensor):
    """x [M, K], w_float [N, K] -> (x @ w^T in float64, the derived bound [M, N])."""
    m, k = x.shape
    xd, wd = x.double(), w_float.double()
    d = x.reshape(m, k // 32, 32).abs().amax(-1).double() / 127                # [M, K/32]
    half_step = (d / 2).repeat_interleave(32, dim=1)                          # [M, K]
    gamma = k * 2.0 ** -24 / (1 - k * 2.0 ** -24)
    bound = half_step @ wd.abs().t() + 2 * gamma * ((xd.abs() + half_step) @ wd.abs().t())  # [M, N]
    return xd @ wd.t(), bound


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m,n,k", [(1, 40, 512), (3, 17, 256), (6, 33, 512), (9, 70, 1536)])
def test_quant_linear_within_the_activation_rounding_bound(isa, fmt, m, n, k):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(m * 100 + n + k)
    w = random_blocks(fmt, n, k, g)                                           # [N, row_bytes]
    x = torch.randn(m, k, generator=g) * torch.linspace(0.1, 3, k)            # [M, K] uneven blocks
    want, bound = _reference_and_bound(x, cpu_quant.dequantize(w, fmt, k))
    got = cpu_quant.quant_linear(x, w, fmt, isa)                              # [M, N]
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"{fmt} {isa}: worst excess {(err - bound).max().item():.3g}"
    assert float(err.max()) > 0  # it did quantize: a float path would be exact to rounding


@pytest.mark.parametrize("fmt", FORMATS)
def test_isa_paths_agree_and_write_into_a_strided_slice(fmt):
    """Each ISA path does the same integer sums, so they agree to float rounding; the output may be a column
    slice of a wider tensor (the fused q/k/v and gate/up outputs)."""
    g = torch.Generator().manual_seed(7)
    k = 512
    w = random_blocks(fmt, 24, k, g)
    x = torch.randn(4, k, generator=g)
    runnable = [isa for isa in NATIVE_ISAS if cpu_quant.isa_supported(isa) is None]
    if len(runnable) < 2:
        pytest.skip(f"one native ISA path here ({runnable})")
    outs = []
    for isa in runnable:
        wide = torch.full((4, 40), float("nan"))                              # [M, 40]
        cpu_quant.quant_linear(x, w, fmt, isa, out=wide[:, 8:32])
        assert wide[:, :8].isnan().all() and wide[:, 32:].isnan().all()
        outs.append(wide[:, 8:32])
    for isa, out in zip(runnable[1:], outs[1:]):
        torch.testing.assert_close(out, outs[0], rtol=1e-5, atol=1e-5, msg=lambda s: f"{isa}: {s}")


def test_torch_fallback_is_the_float_product():
    g = torch.Generator().manual_seed(3)
    w = random_blocks("Q4_1", 16, 256, g)
    x = torch.randn(2, 256, generator=g)
    want = x @ cpu_quant.dequantize(w, "Q4_1", 256).t()
    torch.testing.assert_close(cpu_quant.quant_linear(x, w, "Q4_1", "torch"), want)


def test_best_isa_on_this_machine_and_forcing(monkeypatch):
    expected = next(isa for isa in cpu_quant.ISAS if cpu_quant.isa_supported(isa) is None)
    assert cpu_quant.best_isa() == expected
    monkeypatch.setenv("RADIXLM_QUANT_ISA", "scalar")
    assert cpu_quant.best_isa() == "scalar"
    monkeypatch.setenv("RADIXLM_QUANT_ISA", "sse9")
    with pytest.raises(ValueError, match="sse9"):
        cpu_quant.best_isa()


def test_bad_shapes_are_refused():
    g = torch.Generator().manual_seed(1)
    w = random_blocks("Q4_K", 4, 256, g)
    with pytest.raises(ValueError, match="whole blocks of 256"):
        cpu_quant.quant_linear(torch.randn(1, 288), w, "Q4_K", "scalar")
    with pytest.raises(ValueError, match="uint8"):
        cpu_quant.quant_linear(torch.randn(1, 256), w[:, :100], "Q4_K", "scalar")
