"""ALiBi (BLOOM, MPT: head h's score of key j for the query at position p gains slope_h * (j - p)) in the torch
reference and the Triton kernels, alone and with a sliding window; the attention backend's routing of ALiBi layers
(the native CPU kernels take none: the torch reference runs them).

Oracles: the torch reference against a brute-force loop over keys; the Triton kernels (interpreter on CPU, compiled
on CUDA as `gpu` tests) and the backend against the torch reference (variant_checks.py).  The pool's unused slot
holds NaN (tests/kernels/test_attention_window.py's Case), so a read past a window or a length shows.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

from test_attention_window import DEVICES, HQ, Case  # noqa: E402
from variant_checks import (  # noqa: E402
    check_backend_mixed_step,
    check_reference_against_brute,
    check_triton_decode,
    check_triton_extend,
)

from radixlm.kernels import torch_ref  # noqa: E402

WINDOWS = [None, 5]
SLOPES = torch.tensor([0.5, 0.25, 0.7, 0.0])  # [Hq] steep enough to move every softmax, one head without


@pytest.mark.parametrize("window", WINDOWS)
def test_torch_reference_against_brute_force(window):
    def biased(h, s, js):
        return s + float(SLOPES[h]) * (torch.tensor(js, dtype=torch.float64) - js[-1])  # [n] the query at js[-1]

    check_reference_against_brute(window, biased, alibi=SLOPES)


def test_alibi_changes_the_result():
    """The oracle is not vacuous: the slopes move the output of every head with one."""
    case = Case([20])
    q = torch.randn(1, HQ, case.k.shape[-1], generator=case.gen)  # [1, Hq, D]
    plain = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2)
    biased = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2, alibi=SLOPES)
    assert (plain - biased)[:, :3].abs().amax(dim=(0, 2)).min() > 1e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_triton_decode(device, window, num_splits):
    check_triton_decode(device, window, num_splits, alibi=SLOPES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", WINDOWS)
def test_triton_extend(device, window):
    check_triton_extend(device, window, alibi=SLOPES)


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_backend_layer_variants_with_alibi(backend):
    """Every layer with ALiBi (layer 1 also windowed) in one mixed step; the cpu backend hands these layers to the torch
    reference."""
    check_backend_mixed_step(backend, {"alibi": SLOPES}, [{"alibi": SLOPES}] * 2)
