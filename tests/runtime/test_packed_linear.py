"""Linear layers from packed weights (runtime/models/packed_linear.py) against a float64 product.

Bound: any order of a K-term float32 dot product is within gamma_K = K u / (1 - K u) (u = 2^-24) of the exact
sum, relative to sum |x_k w_k| (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), so every GEMM
kernel passes it whatever its blocking, and a wrong row, column or padding leak fails it.
"""

import pytest
import torch

from radixlm.runtime.models import packed_linear
from radixlm.runtime.models.packed_linear import ROWS_PACK, ROWS_PACK_FROM, add_rows_pack, linear, pack

pytestmark = pytest.mark.skipif(not packed_linear.packing_available(torch.float32, "cpu"),
                                reason="this torch build cannot pack weights for the CPU GEMM")


def _check(got, x, w, b):
    k = x.shape[1]
    u = 2.0 ** -24
    gamma = k * u / (1 - k * u)
    exact = x.double() @ w.double().T + b.double()
    scale = x.double().abs() @ w.double().abs().T + b.double().abs()
    assert got.dtype == torch.float32 and got.shape == exact.shape
    assert bool(((got.double() - exact).abs() <= gamma * scale + u * exact.abs()).all())


def _weights(n=300, k=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g), torch.randn(n, generator=g)


@pytest.mark.parametrize("rows", [1, ROWS_PACK_FROM - 1, ROWS_PACK_FROM, 47, ROWS_PACK, ROWS_PACK + 1, 200])
def test_packed_weights_multiply_within_float32_error(rows):
    w, b = _weights()
    x = torch.randn(rows, w.shape[1], generator=torch.Generator().manual_seed(rows))
    packed = pack(w)
    _check(linear(x, packed, b), x, w, b)
    if packed_linear.rows_pack_supported():
        add_rows_pack(packed, w)
        _check(linear(x, packed, b), x, w, b)


def test_the_rows_pack_serves_exactly_its_row_range(monkeypatch):
    if not packed_linear.rows_pack_supported():
        pytest.skip("no MKL packed SGEMM for this CPU (used on Intel only)")
    assert packed_linear.rows_pack_available(torch.float32, "cpu")   # its self-test passed
    w, b = _weights(seed=1)
    packed = pack(w)
    add_rows_pack(packed, w)
    full = torch.randn(ROWS_PACK, w.shape[1], generator=torch.Generator().manual_seed(2))
    whole = linear(full, packed, b)
    taken, real = [], packed_linear._linear_rows_pack
    monkeypatch.setattr(packed_linear, "_linear_rows_pack", lambda x, *a: taken.append(x.shape[0]) or real(x, *a))
    for rows in (ROWS_PACK_FROM - 1, ROWS_PACK_FROM, 50, ROWS_PACK, ROWS_PACK + 1):
        got = linear(torch.cat((full, full))[:rows], packed, b)
        if ROWS_PACK_FROM <= rows <= ROWS_PACK:   # the padding rows change nothing in the real ones
            assert torch.equal(got, whole[:rows])
    assert taken == [ROWS_PACK_FROM, 50, ROWS_PACK]
    assert linear(full.bfloat16(), pack(w.bfloat16())).dtype == torch.bfloat16   # bf16 weights: oneDNN only


def test_rows_pack_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("RADIXLM_DISABLE_ROWS_PACK", "1")
    assert not packed_linear.rows_pack_available(torch.float32, "cpu")
    assert not packed_linear.rows_pack_available(torch.bfloat16, "cpu")


def _amx_available():
    return packed_linear.amx_pack_available(torch.bfloat16, "cpu")


@pytest.mark.skipif(not _amx_available(), reason="no AMX-BF16 tile unit on this CPU (or no native build)")
@pytest.mark.parametrize("rows", [1, 15, 16, 17, 31, 32])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_amx_copy_multiplies_bfloat16_within_its_rounding(rows, with_bias):
    """bfloat16 products are exact in float32, so the sums obey the float32 bound above; the bias is added in
    float32 (u of the sum) and the output rounded once to bfloat16 (2^-8 of it)."""
    w, b = _weights(n=300, k=96, seed=rows)
    w, b = w.bfloat16(), b.bfloat16() if with_bias else None
    wide = torch.randn(rows, 2 * w.shape[1], generator=torch.Generator().manual_seed(rows)).bfloat16()
    x = wide[:, :w.shape[1]]                                         # rows strided, as a fused output's slice
    packed = pack(w)
    packed_linear.add_amx_pack(packed, w)
    got = linear(x, packed, b)
    u, k = 2.0 ** -24, w.shape[1]
    bias = torch.zeros(w.shape[0], dtype=torch.float64) if b is None else b.double()
    exact = x.double() @ w.double().T + bias
    scale = x.double().abs() @ w.double().abs().T + bias.abs()
    sums = (k * u / (1 - k * u) + u) * scale
    assert got.dtype == torch.bfloat16 and got.shape == exact.shape
    assert bool(((got.double() - exact).abs() <= sums + 2.0 ** -8 * (exact.abs() + sums)).all())


@pytest.mark.skipif(not _amx_available(), reason="no AMX-BF16 tile unit on this CPU (or no native build)")
def test_the_amx_copy_serves_up_to_amx_rows_each_row_alone(monkeypatch):
    from radixlm.kernels import cpu_packed

    rows_max = packed_linear.AMX_ROWS
    w = _weights(n=70, k=64, seed=3)[0].bfloat16()
    packed = pack(w)
    packed_linear.add_amx_pack(packed, w)
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(4)).bfloat16()
    whole = cpu_packed.amx_linear(x, packed._amx_pack[0], 70)          # the kernel takes up to 64 rows
    taken, real = [], cpu_packed.amx_linear
    monkeypatch.setattr(cpu_packed, "amx_linear", lambda x, *a: taken.append(x.shape[0]) or real(x, *a))
    for rows in (1, 17, rows_max, rows_max + 1):
        got = linear(x[:rows], packed)
        if rows <= rows_max:   # a row's sums do not depend on the rows beside it
            assert torch.equal(got, whole[:rows])
    assert taken == [1, 17, rows_max]


def test_amx_copy_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("RADIXLM_DISABLE_AMX_LINEAR", "1")
    assert not packed_linear.amx_pack_available(torch.bfloat16, "cpu")
