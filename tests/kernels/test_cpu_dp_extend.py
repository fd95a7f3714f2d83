"""The bfloat16 pair-product extend kernel (radixlm_kernels/csrc/dp_pairs.h through cpu_flash_f32.c's packed plan) against
a float64 run of the torch reference, for CPUs with AVX512-BF16 and without AMX.

Its roundings are the AMX tile kernel's: scores are float32 sums of exact bfloat16 products, each softmax weight
is rounded once to bfloat16 before it weights the values, whose products are exact and summed in float32, and
the output is rounded once.  So the bound is the one test_cpu_amx_extend.py derives for that kernel.  Where the
CPU or the build has no AVX512-BF16 these tests skip, visibly; the widened FMA kernel then takes its place
(test_cpu_flash_f32.py).
"""

import pytest
import torch
from test_cpu_amx_extend import _batch, _reference_and_bound

from radixlm.kernels import cpu_native, cpu_packed

pytestmark = pytest.mark.skipif(not (cpu_native.available() and cpu_packed.dp_extend_available(64)),
                                reason="no AVX512-BF16 on this CPU (or no native build): the pair-product kernel "
                                       "cannot run here")


@pytest.mark.parametrize("heads", [(9, 3, 64), (8, 2, 64), (4, 4, 128)])
@pytest.mark.parametrize("prefix,ext", [
    ([0], [16]), ([0], [1]), ([0, 7, 30], [5, 1, 12]),         # one tile of rows; fewer rows than a tile
    ([1500, 2], [33, 16]), ([0, 9], [17, 255]),                # a long cached prefix; partial tiles
    ([0, 20, 5], [259, 4, 256]), ([100, 0, 3], [0, 40, 8]),   # prefill chunks; a request with no new tokens
    ([6, 1], [1, 2]),                                          # an odd number of keys: the last pair half empty
])
def test_within_its_rounding_of_float64(heads, prefix, ext):
    q, k, v, table, rows, p, e = _batch(prefix, ext, *heads)
    scale = heads[2] ** -0.5
    want, bound = _reference_and_bound(q, k, v, table, rows, p, e, scale)
    got = cpu_packed.dp_extend_attention(q, k, v, table, rows, p, e, scale)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"


def test_large_scores_stay_within_bound():
    """Queries ten times larger: peaked softmaxes, where an error in the max or the exp shows."""
    q, k, v, table, rows, p, e = _batch([300, 0], [40, 70], 9, 3, 64, seed=3, q_scale=10.0)
    want, bound = _reference_and_bound(q, k, v, table, rows, p, e, 0.125)
    got = cpu_packed.dp_extend_attention(q, k, v, table, rows, p, e, 0.125)
    assert bool(((got.double() - want).abs() <= bound).all())
