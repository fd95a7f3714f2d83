"""Attention sinks (gpt-oss: a learned per-head logit that joins the softmax's denominator and takes no value) in
every attention kernel, alone and with a sliding window.

Oracles: the torch reference against a brute-force loop over keys (softmax over the scores and the sink, the sink's
share dropped); the Triton kernels (interpreter on CPU, compiled on CUDA as `gpu` tests), the native CPU kernels
(the sink as their prior of no keys) and the attention backend against the torch reference (variant_checks.py).  The
pool's unused slot holds NaN (tests/kernels/test_attention_window.py's Case), so a read past a window or a length
shows.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

from test_attention_window import DEVICES, HQ, Case, _native  # noqa: E402
from variant_checks import (  # noqa: E402
    check_backend_mixed_step,
    check_reference_against_brute,
    check_triton_decode,
    check_triton_extend,
)

from radixlm.kernels import torch_ref  # noqa: E402

WINDOWS = [None, 5]
SINKS = torch.tensor([1.5, -0.5, 3.0, 0.0])  # [Hq] large enough to take a visible share of every softmax


@pytest.mark.parametrize("window", WINDOWS)
def test_torch_reference_against_brute_force(window):
    check_reference_against_brute(window, lambda h, s, js: torch.cat((s, SINKS[h:h + 1].double())), sinks=SINKS)


def test_sinks_change_the_result():
    """The oracle is not vacuous: sinks shrink every output row by the sink's share."""
    case = Case([20])
    q = torch.randn(1, HQ, case.k.shape[-1], generator=case.gen)  # [1, Hq, D]
    plain = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2)
    sunk = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2, sinks=SINKS)
    assert (plain - sunk).abs().max() > 1e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_triton_decode(device, window, num_splits):
    check_triton_decode(device, window, num_splits, sinks=SINKS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", WINDOWS)
def test_triton_extend(device, window):
    check_triton_extend(device, window, sinks=SINKS)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ext", [[9, 21, 1], [3, 8, 1]])
def test_cpu_kernels(window, per_token, dtype, ext):
    """The native kernels with the sink as their prior: decode (over a gathered window), extend (one call, or one
    decode query per token) and the torch reference for long windowed extends."""
    from radixlm.kernels import cpu_window

    _native()
    prefix = [30, 0, 5]
    case = Case([p + e for p, e in zip(prefix, ext)], seed=3)
    k, v, table, rows = case.tables()
    k, v = k.to(dtype), v.to(dtype)
    q = torch.randn(sum(ext), HQ, k.shape[-1], generator=case.gen).to(dtype)  # [T, Hq, D]
    args = (torch.tensor(prefix), torch.tensor(ext), 0.2)
    out = cpu_window.extend_attention(q, k, v, table, rows, *args, window=window, per_token=per_token, sinks=SINKS)
    ref = torch_ref.extend_attention(q.float(), k.float(), v.float(), table, rows, *args, window=window, sinks=SINKS)
    tol = 2e-3 if dtype == torch.float32 else 3e-2
    assert torch.isfinite(out).all() and (out.float() - ref).abs().max().item() < tol
    seq = torch.tensor([p + e for p, e in zip(prefix, ext)])
    qd = q[:3]  # [3, Hq, D]
    out = cpu_window.decode_attention(qd, k, v, table, rows, seq, 0.2, window=window, sinks=SINKS)
    ref = torch_ref.decode_attention(qd.float(), k.float(), v.float(), table, rows, seq, 0.2, window=window,
                                     sinks=SINKS)
    assert torch.isfinite(out).all() and (out.float() - ref).abs().max().item() < tol


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_backend_layer_variants_with_sinks(backend):
    """Layer 0 full with sinks, layer 1 windowed with sinks, in one mixed step (two decodes and an extend)."""
    check_backend_mixed_step(backend, {"sinks": [SINKS, -SINKS]}, [{"sinks": SINKS}, {"sinks": -SINKS}])
