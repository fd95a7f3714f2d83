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

From cpu_quant.DENSE_ROWS rows on it multiplies tiles of 16 weight rows instead.  In the vnni build these are int8
tiles: the weight rows unpacked to signed bytes with one scale per sub-block, the input quantized to the same Q8
blocks as the integer dot products, so the same integer sums per block and the same bound as they; only the float
sums are taken in another order (a few float32 ulps of the sum of their terms apart).  Elsewhere, or with int8 tiles
off (cpu_quant.set_int8_tiles), they are dense tiles: weight rows dequantized by the C dequantizer
(equal to the gguf package's, bit for bit, and to its bfloat16 rounding) and the dense row kernels.  Nothing is
quantized there but the weights' rounding to bfloat16 (2^-9 of each, so 2^-9 of sum_k |x_k W[n, k]|) for a bfloat16
input; float32 sums add 2 gamma_K of the same sum, a bfloat16 output half an ulp.  A dropped block scale or offset
is off by the weights' own size.
"""

import contextlib

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
    with _dense_rows(isa, 0):   # the integer dot products at every row count (9 rows: 4 + 4 + 1)
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


@contextlib.contextmanager
def _setting(get, put, isa: str, value):
    before = get(isa)
    put(isa, value)
    try:
        yield
    finally:
        put(isa, before)


def _int8_tiles(isa: str, on: bool):
    return _setting(cpu_quant.int8_tiles, cpu_quant.set_int8_tiles, isa, on)


def _dense_rows(isa: str, rows: int):
    return _setting(cpu_quant.dense_rows, cpu_quant.set_dense_rows, isa, rows)


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("fmt", list(cpu_quant.FORMATS))
def test_the_native_dequantizer_is_the_gguf_one(isa, fmt):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(11)
    w = random_blocks(fmt, 21, K, g)
    want = cpu_quant.dequantize(w, fmt, K)                                   # [21, K] float32
    assert torch.equal(cpu_quant.dequantize_native(w, fmt, K, isa), want)
    assert torch.equal(cpu_quant.dequantize_native(w, fmt, K, isa, torch.bfloat16), want.bfloat16())


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 18])
def test_dense_tiles_within_the_weight_rounding_bound(isa, dtype, rows):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(100 + rows)
    blocks, w_float = _weight(g)
    n = w_float.shape[0]
    x = (torch.randn(rows, K, generator=g) * torch.linspace(0.1, 3, K)).to(dtype)   # [M, K]
    bias = torch.randn(n, generator=g).to(dtype)                                      # [N]
    with _dense_rows(isa, 1), _int8_tiles(isa, False):
        got = cpu_quant.layer_linear(x, cpu_quant.layer_linear_weights(blocks), K, isa, bias=bias)   # [M, N]
    xd = x.double()
    want = xd @ w_float.double().t() + bias.double()                         # [M, N]
    magnitude = xd.abs() @ w_float.double().abs().t()                        # [M, N]
    gamma = K * 2.0 ** -24 / (1 - K * 2.0 ** -24)
    bound = 2 * gamma * magnitude
    if dtype == torch.bfloat16:
        bound = bound + 2.0 ** -9 * magnitude
        bound = bound + 2.0 ** -9 * (want.abs() + bound)
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"{isa} {dtype}: worst excess {(err - bound).max().item():.3g}"
    # far inside the integer path's bound: nothing was quantized but the weights' rounding
    assert float(err.max()) < float(_reference_and_bound(x.float(), w_float)[1].max())


@pytest.mark.parametrize("isa", NATIVE_ISAS)
def test_the_product_switches_to_dense_tiles_at_dense_rows(isa):
    _isa_or_skip(isa)
    g = torch.Generator().manual_seed(3)
    blocks, _ = _weight(g)
    desc = cpu_quant.layer_linear_weights(blocks)
    x = torch.randn(6, K, generator=g).to(torch.bfloat16)                     # [6, K]
    results = {}
    for mode, rows in (("integer", 0), ("dense", 1), ("from 4", 4)):
        with _dense_rows(isa, rows), _int8_tiles(isa, False):
            results[mode] = (cpu_quant.layer_linear(x[:3], desc, K, isa), cpu_quant.layer_linear(x, desc, K, isa))
    assert not torch.equal(results["integer"][1], results["dense"][1])
    assert torch.equal(results["from 4"][0], results["integer"][0])          # 3 rows: below the switch
    assert torch.equal(results["from 4"][1], results["dense"][1])            # 6 rows: dense tiles


ALL_FORMATS = (("Q4_0", 19), ("Q4_1", 16), ("Q5_0", 5))   # with PARTS: every format the int8 tiles unpack


@pytest.mark.parametrize("isa", NATIVE_ISAS)
@pytest.mark.parametrize("parts", [PARTS, ALL_FORMATS], ids=["q4_k-q6_k-q8_0", "q4_0-q4_1-q5_0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [5, 16, 37])
def test_int8_tiles_within_the_activation_rounding_bound(isa, parts, dtype, rows):
    _isa_or_skip(isa)
    if isa != "vnni":
        pytest.skip(f"int8 tiles are built for vnni only, not {isa}")
    g = torch.Generator().manual_seed(200 + rows)
    blocks, w_float = _weight(g, parts)
    desc = cpu_quant.layer_linear_weights(blocks)
    n = w_float.shape[0]
    x = (torch.randn(rows, K, generator=g) * torch.linspace(0.1, 3, K)).to(dtype)   # [M, K]
    bias = torch.randn(n, generator=g).to(dtype)                                      # [N]
    with _dense_rows(isa, 1), _int8_tiles(isa, True):
        got = cpu_quant.layer_linear(x, desc, K, isa, bias=bias)                       # [M, N]
        assert torch.equal(cpu_quant.layer_linear(x, desc, K, isa, bias=bias, threads=1), got)
    with _dense_rows(isa, 0):
        dots = cpu_quant.layer_linear(x, desc, K, isa, bias=bias)                      # the integer dot products
    want, bound = _reference_and_bound(x.float(), w_float)                            # [M, N] float64 each
    want = want + bias.double()
    if dtype == torch.bfloat16:
        bound = bound + 2.0 ** -9 * (want.abs() + bound)
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"{dtype}: worst excess {(err - bound).max().item():.3g}"
    assert float(err.max()) > 0   # it did quantize
    # the dot products' integer sums, in another float order: float32 rounding of the terms' sum apart (a bfloat16
    # output may round either way of a half ulp)
    magnitude = x.double().abs() @ w_float.double().abs().t() + bias.double().abs()  # [M, N]
    apart = 4 * K * 2.0 ** -24 * magnitude
    if dtype == torch.bfloat16:
        apart = apart + 2.0 ** -8 * dots.double().abs()
    assert bool(((got.double() - dots.double()).abs() <= apart).all())


def test_the_int8_tiles_setting_is_checked(monkeypatch):
    monkeypatch.setenv("RADIXLM_QUANT_INT8_TILES", "0")
    assert cpu_quant._int8_tiles_setting() == 0
    monkeypatch.setenv("RADIXLM_QUANT_INT8_TILES", "")
    assert cpu_quant._int8_tiles_setting() == 1
    monkeypatch.setenv("RADIXLM_QUANT_INT8_TILES", "yes")
    with pytest.raises(ValueError, match="RADIXLM_QUANT_INT8_TILES"):
        cpu_quant._int8_tiles_setting()


def test_the_dense_rows_setting_is_checked(monkeypatch):
    monkeypatch.setenv("RADIXLM_QUANT_DENSE_ROWS", "16")
    assert cpu_quant._dense_rows_setting("vnni") == 16
    monkeypatch.setenv("RADIXLM_QUANT_DENSE_ROWS", "")
    assert cpu_quant._dense_rows_setting("avx2") == cpu_quant.DENSE_ROWS["avx2"]
    monkeypatch.setenv("RADIXLM_QUANT_DENSE_ROWS", "eight")
    with pytest.raises(ValueError, match="RADIXLM_QUANT_DENSE_ROWS"):
        cpu_quant._dense_rows_setting("vnni")
