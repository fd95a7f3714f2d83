"""The native decode call's quantized linear layer (radixlm_kernels/csrc/cpu_quant_layer.c): a weight of parts in
different GGUF formats stacked along N (q/k/v, gate/up), its input quantized once, a bias, float32 or bfloat16 in
and out.

Against the float reference (the parts dequantized by the gguf package, the product in float64) the bound is
test_cpu_quant's, derived from the activation quantization: every activation moves by at most half its block's
step d / 2, so an output moves by at most sum_b (d_b / 2) sum_{k in b} |W[n, k]|, plus float32 rounding of the
block sums; a bfloat16 output adds its own rounding, half an ulp: 2^-9 of its magnitude.  A dropped weight or
activation scale, a part written into the wrong columns or a missing bias is off by the weights' own size.

Against the op-by-op path (quant_linear.QuantWeight.linear, one product per part on the same activation blocks)
it is equal bit for bit: the same blocks, the same per-row sums, the bias added in float32, the same rounding.
"""

import pytest
import torch
from test_cpu_quant import NATIVE_ISAS, _isa_or_skip, _reference_and_bound, random_blocks

from radixlm.kernels import cpu_quant
from radixlm.runtime.models.quant_linear import QuantPart, QuantWeight

K = 512
PARTS = (("Q4_K", 40), ("Q6_K", 24), ("Q8_0", 17))   # q, k, v of a Q4_K_M file: mixed formats, odd tile edges


def _weight(g, parts=PARTS):
    blocks = [(fmt, random_blocks(fmt, n, K, g)) for fmt, n in parts]        # [(fmt, uint8 [n, row_bytes])]
    w_float = torch.cat([cpu_quant.dequantize(w, fmt, K) for fmt, w in blocks])  # [N, K]
    return blocks, w_float


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 9])
def test_layer_linear_within_the_activation_rounding_bound(isa, dtype, rows):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(rows)
    blocks, w_float = _weight(g)
    n = w_float.shape[0]
    x = (torch.randn(rows, K, generator=g) * torch.linspace(0.1, 3, K)).to(dtype)   # [M, K]
    bias = torch.randn(n, generator=g).to(dtype)                                      # [N]
    got = cpu_quant.layer_linear(x, cpu_quant.layer_linear_weights(blocks), K, isa, bias=bias)   # [M, N]
    assert got.dtype == dtype and got.shape == (rows, n)
    want, bound = _reference_and_bound(x.float(), w_float)                   # [M, N] float64 each
    want = want + bias.double()
    if dtype == torch.bfloat16:
        bound = bound + 2.0 ** -9 * (want.abs() + bound)
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"{isa} {dtype}: worst excess {(err - bound).max().item():.3g}"
    assert float(err.max()) > 0   # it did quantize


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_linear_is_the_op_by_op_product(isa, dtype):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(5)
    blocks, _ = _weight(g)
    x = torch.randn(6, K, generator=g).to(dtype)                              # [M, K]
    bias = torch.randn(sum(n for _, n in PARTS), generator=g).to(dtype)       # [N]
    op_by_op = QuantWeight([QuantPart(fmt, w) for fmt, w in blocks], K, isa).linear(x, bias)   # [M, N]
    for threads in (1, 2):
        got = cpu_quant.layer_linear(x, cpu_quant.layer_linear_weights(blocks), K, isa, bias=bias, threads=threads)
        assert torch.equal(got, op_by_op), f"{threads} threads"


def test_layer_linear_refuses_what_it_cannot_take():
    g = torch.Generator().manual_seed(2)
    w = random_blocks("Q4_0", 8, K, g)
    with pytest.raises(ValueError, match="1 to 3 parts"):
        cpu_quant.layer_linear_weights([("Q4_0", w)] * 4)
    with pytest.raises(ValueError, match="1 to 3 parts"):
        cpu_quant.layer_linear_weights([("dense", torch.zeros(8, K))])
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        cpu_quant.layer_linear(torch.zeros(1, K, dtype=torch.float16), cpu_quant.layer_linear_weights([("Q4_0", w)]),
                               K, cpu_quant.best_isa())
