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
