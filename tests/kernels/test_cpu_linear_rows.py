"""The row kernel of decode-step linear layers (radixlm_kernels/csrc/cpu_linear_rows.c) against a float64 product.

The bound is derived: the kernel sums K float32 products (exact for bfloat16 inputs, rounded once for
float32 ones) in float32, so its error is at most gamma_K = K * 2^-24 / (1 - K * 2^-24) times sum |x_k w_k|
(plus the bias's one addition); a bfloat16 result is then rounded once more, by at most half an ulp,
2^-9 relative.  A wrong row, stride, tail or bias is off by the products' own size.
"""

import os

import pytest
import torch

from radixlm.kernels import cpu_native

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="no C compiler for the native kernels")


def _bound(x, w, bias, dtype):
    k = x.shape[1]
    gamma = (k + 1) * 2.0 ** -24 / (1 - (k + 1) * 2.0 ** -24)
    mags = x.double().abs() @ w.double().abs().t()  # [M, N]
    if bias is not None:
        mags = mags + bias.double().abs()
    want = x.double() @ w.double().t() + (0 if bias is None else bias.double())
    bound = gamma * mags
    if dtype == torch.bfloat16:
        bound = bound + 2.0 ** -8 * (want.abs() + bound)  # the result's one rounding to bfloat16
    return want, bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,k,n", [(1, 576, 960), (2, 1536, 576), (3, 64, 7), (5, 40, 13), (6, 577, 130),
                                      (4, 32, 4096), (9, 200, 33)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_rows_matches_a_float64_product(dtype, rows, k, n, with_bias):
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    wide = torch.randn(rows, k + 24, generator=g).to(dtype)
    x = wide[:, 8:8 + k]  # rows strided: a view into a wider tensor
    w = torch.randn(n, k, generator=g).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype) if with_bias else None
    for out_f32 in (False, True):
        got = cpu_native.linear_rows(x, w, bias, out_f32=out_f32)
        assert got.shape == (rows, n) and got.dtype == (torch.float32 if out_f32 else dtype)
        want, bound = _bound(x, w, bias, dtype)
        err = (got.double() - want).abs()
        worst = divmod(int(err.argmax()), n)
        assert bool((err <= bound).all()), f"error {err[worst].item():.3g} at {worst}, bound there {bound[worst].item():.3g}"
        if dtype == torch.bfloat16 and out_f32:  # the bf16 result widened, not a float32 sum
            assert torch.equal(got, got.bfloat16().float())


def test_linear_rows_rejects_mismatched_inputs():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="weight"):
        cpu_native.linear_rows(x, torch.randn(4, 9))
    with pytest.raises(ValueError, match="weight"):
        cpu_native.linear_rows(x, torch.randn(4, 8).bfloat16())
    with pytest.raises(ValueError, match="weight must be"):
        cpu_native.linear_rows(x, torch.randn(4, 8), torch.randn(5))


@pytest.mark.parametrize("flags", ["-mno-avx512f", "-mno-avx512bf16"])
def test_other_isa_builds_pass_the_same_tests(flags, tmp_path):
    """bfloat16 takes the pair dot product where the CPU has AVX512-BF16, 16-lane FMA with AVX-512 alone and
    8-lane FMA with AVX2: on a machine with more, the builds without it run this file in a child process."""
    import subprocess
    import sys

    feature = flags.removeprefix("-mno-").replace("avx512bf16", "avx512_bf16")
    if feature not in cpu_native.cpu_features():
        pytest.skip(f"no {feature}: the default build is already the one without it")
    env = {**os.environ, "RADIXLM_NATIVE_CFLAGS": flags, "RADIXLM_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "not isa_builds"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and list(tmp_path.glob("kernels/radixlm_cpu-*.so"))
