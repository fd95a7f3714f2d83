"""Linear layers with weights pre-packed for the CPU GEMM (oneDNN), packed once after loading.

A plain `F.linear` on a CPU repacks its weight into the GEMM's blocked layout on every call; for a
model whose weights do not fit in cache that doubles the memory traffic of a decode step.  oneDNN
can reorder a weight once into its own layout (an opaque mkldnn tensor) and multiply from it
directly: about 30% faster decode and prefill steps on a 2-core AVX2 machine.

`linear(x, w, bias)` takes a dense weight, a packed one or a quant_linear.QuantWeight (GGUF blocks), so models call it everywhere and
work unchanged where packing is unavailable (CUDA, builds without oneDNN, other dtypes) or
disabled with RADIXLM_DISABLE_PACKED_GEMM=1.

float32 decode batches of ROWS_PACK_FROM..ROWS_PACK rows: oneDNN's GEMM runs well below the FMA peak there, and
MKL's own packed SGEMM, whose packing is for one row count, is faster at exactly that count even with the rows
padded up to it (a model's weights, 64 rows: 2.5 -> 1.85 ms a SmolLM2 layer on an Intel AVX-512 CPU).
add_rows_pack gives a packed weight that second copy; linear then takes it for those batches.  Intel CPUs only
(MKL's speed elsewhere is not measured); RADIXLM_DISABLE_ROWS_PACK=1 turns it off.

bfloat16 decode batches of up to AMX_ROWS rows on a CPU with AMX: oneDNN's GEMM streams the weights at well below
the memory's speed there; the native tile-unit kernel (radixlm_kernels/csrc/cpu_amx_linear.c) reads a copy packed for it
in order (a SmolLM2 decode step's linear layers: 16.4 -> 13.0 ms at 16 rows, 19.0 -> 16.6 ms at 32; from about
48 rows oneDNN is as fast or faster, bench/README.md stop 17).  add_amx_pack gives a packed weight that copy;
RADIXLM_DISABLE_AMX_LINEAR=1 turns it off.
"""

import logging
import os
from typing import Optional

import torch
import torch.nn.functional as F

from radixlm.kernels import cpu_native, cpu_packed
from radixlm.runtime.models.quant_linear import QuantWeight

from .fp8_linear import Fp8Weight, fp8_linear

logger = logging.getLogger(__name__)
_PACK_BATCH_HINT = 64  # oneDNN picks its blocking for about this many rows; any row count works
ROWS_PACK = 64        # the row count MKL's second packing is for
ROWS_PACK_FROM = 40   # fewer rows: padding them to ROWS_PACK costs more than it gains (bench/README.md)
AMX_ROWS = 32         # the most rows the AMX linear is given: faster than oneDNN up to here (measured)
_checked: dict = {}


def packing_available(dtype: torch.dtype, device) -> bool:
    """Whether weights of this dtype on this device can be packed (checked once by a small product)."""
    if torch.device(device).type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return False
    if os.environ.get("RADIXLM_DISABLE_PACKED_GEMM", "").strip() in ("1", "true", "yes"):
        return False
    if dtype not in _checked:
        _checked[dtype] = _self_test(dtype)
    return _checked[dtype]


def _self_test(dtype) -> bool:
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        g = torch.Generator().manual_seed(0)
        w = torch.randn(48, 40, generator=g).to(dtype)  # [N, K]
        x = torch.randn(5, 40, generator=g).to(dtype)   # [M, K]
        b = torch.randn(48, generator=g).to(dtype)      # [N]
        got = linear(x, pack(w), b).float()
        want = F.linear(x.float(), w.float(), b.float())
        tol = 1e-4 if dtype == torch.float32 else 0.1
        return got.shape == want.shape and bool((got - want).abs().max() < tol)
    except (RuntimeError, AttributeError, NotImplementedError) as exc:
        logger.info("packed CPU GEMM unavailable (%s); using F.linear", exc)
        return False


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] dense -> an opaque oneDNN tensor holding the same values in the GEMM's layout."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), _PACK_BATCH_HINT)


def rows_pack_available(dtype: torch.dtype, device) -> bool:
    """Whether add_rows_pack applies: float32 on an Intel CPU whose torch has MKL's packed SGEMM."""
    if dtype != torch.float32 or not packing_available(dtype, device):
        return False
    if os.environ.get("RADIXLM_DISABLE_ROWS_PACK", "").strip() in ("1", "true", "yes"):
        return False
    if "rows" not in _checked:
        _checked["rows"] = rows_pack_supported() and _rows_self_test()
    return _checked["rows"]


def rows_pack_supported() -> bool:
    """An Intel CPU and a torch with MKL's packed SGEMM (what rows_pack_available also self-tests)."""
    return (_intel_cpu() and torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


def _intel_cpu() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


def _rows_self_test() -> bool:
    try:
        g = torch.Generator().manual_seed(0)
        w, b = torch.randn(48, 40, generator=g), torch.randn(48, generator=g)   # [N, K], [N]
        x = torch.randn(ROWS_PACK_FROM, 40, generator=g)                        # [M, K]
        packed = pack(w)
        add_rows_pack(packed, w)
        got = linear(x, packed, b)
        return got.shape == (ROWS_PACK_FROM, 48) and bool((got - F.linear(x, w, b)).abs().max() < 1e-4)
    except (RuntimeError, AttributeError, NotImplementedError) as exc:
        logger.info("MKL packed SGEMM unavailable (%s); oneDNN only", exc)
        return False


def add_rows_pack(packed: torch.Tensor, weight: torch.Tensor) -> None:
    """Give `packed` (pack(weight)) a second copy of weight [N, K], packed by MKL for ROWS_PACK rows."""
    n, k = weight.shape
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(weight.detach().contiguous(), ROWS_PACK)
    shape_only = torch.zeros((), dtype=weight.dtype).expand(n, k)   # MKL's call reads the dense weight's shape only
    packed._rows_pack = (mkl, shape_only)


def amx_pack_available(dtype: torch.dtype, device) -> bool:
    """Whether add_amx_pack applies: bfloat16 weights on a CPU whose native kernels have the AMX linear."""
    if dtype != torch.bfloat16 or not packing_available(dtype, device):
        return False
    if os.environ.get("RADIXLM_DISABLE_AMX_LINEAR", "").strip() in ("1", "true", "yes"):
        return False
    return cpu_native.available() and cpu_packed.amx_linear_available(32)


def add_amx_pack(packed: torch.Tensor, weight: torch.Tensor) -> None:
    """Give `packed` (pack(weight)) a second copy of weight [N, K], packed for the AMX linear, where K allows."""
    n, k = weight.shape
    if cpu_packed.amx_linear_available(k):
        packed._amx_pack = (cpu_packed.amx_linear_pack(weight), n)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           fixed_rows: Optional[int] = None) -> torch.Tensor:
    """x [M, K] @ weight^T (+ bias) -> [M, N]; weight dense [N, K], packed by `pack`, or an Fp8Weight.

    fixed_rows (--deterministic): every GEMM gets exactly that many rows (the last chunk padded with
    zeros), so a row's result never depends on M: a GEMM picks its blocking, and with it each output's
    reduction order over K, by the shape (tests/runtime/test_deterministic.py measures it).  A QuantWeight
    (GGUF blocks) computes every row on its own already, so fixed_rows does not apply to it."""
    if isinstance(weight, QuantWeight):
        return weight.linear(x, bias)
    if fixed_rows:
        return _linear_fixed_rows(x, weight, bias, fixed_rows)
    if isinstance(weight, Fp8Weight):
        return fp8_linear(x, weight, bias)
    if weight.is_mkldnn:
        rows_pack = getattr(weight, "_rows_pack", None)
        if rows_pack is not None and ROWS_PACK_FROM <= x.shape[0] <= ROWS_PACK and x.dtype == torch.float32:
            return _linear_rows_pack(x, rows_pack, bias)
        amx_pack = getattr(weight, "_amx_pack", None)
        if amx_pack is not None and 1 <= x.shape[0] <= AMX_ROWS and x.dtype == torch.bfloat16:
            return cpu_packed.amx_linear(x, amx_pack[0], amx_pack[1], bias)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _linear_rows_pack(x, rows_pack, bias) -> torch.Tensor:
    """x [M, K], M <= ROWS_PACK, padded with zero rows to ROWS_PACK for MKL's packing -> [M, N]."""
    m = x.shape[0]
    if m < ROWS_PACK:
        x = torch.cat((x, x.new_zeros(ROWS_PACK - m, x.shape[1])))     # [ROWS_PACK, K]
    mkl, shape_only = rows_pack
    out = torch.ops.mkl._mkl_linear(x.contiguous(), mkl, shape_only, bias, ROWS_PACK)  # [ROWS_PACK, N]
    return out[:m] if m < ROWS_PACK else out


def _linear_fixed_rows(x, weight, bias, rows: int) -> torch.Tensor:
    m = x.shape[0]
    if m == 0:
        return linear(x, weight, bias)
    pad = -m % rows
    if pad:
        x = torch.cat((x, x.new_zeros(pad, x.shape[1])))                # [M + pad, K]
    chunks = [linear(x[i:i + rows], weight, bias) for i in range(0, m + pad, rows)]  # [rows, N] each
    out = torch.cat(chunks) if len(chunks) > 1 else chunks[0]         # [M + pad, N]
    return out[:m] if pad else out
