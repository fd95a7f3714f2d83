"""Linear layers with weights pre-packed for the CPU GEMM (oneDNN), packed once after loading.

A plain `F.linear` on a CPU repacks its weight into the GEMM's blocked layout on every call; for a
model whose weights do not fit in cache that doubles the memory traffic of a decode step.  oneDNN
can reorder a weight once into its own layout (an opaque mkldnn tensor) and multiply from it
directly: about 30% faster decode and prefill steps on a 2-core AVX2 machine.

`linear(x, w, bias)` takes either a dense weight or a packed one, so models call it everywhere and
work unchanged where packing is unavailable (CUDA, builds without oneDNN, other dtypes) or
disabled with RADIXLM_DISABLE_PACKED_GEMM=1.
"""

import logging
import os
from typing import Optional

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)
_PACK_BATCH_HINT = 64  # oneDNN picks its blocking for about this many rows; any row count works
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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           fixed_rows: Optional[int] = None) -> torch.Tensor:
    """x [M, K] @ weight^T (+ bias) -> [M, N]; weight dense [N, K] or packed by `pack`.

    fixed_rows (--deterministic): every GEMM gets exactly that many rows (the last chunk padded with
    zeros), so a row's result never depends on M: a GEMM picks its blocking, and with it each output's
    reduction order over K, by the shape (tests/runtime/test_deterministic.py measures it)."""
    if fixed_rows:
        return _linear_fixed_rows(x, weight, bias, fixed_rows)
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


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
