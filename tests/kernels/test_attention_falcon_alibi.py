"""Falcon's ALiBi (alibi_bf16: head h's score of the key at position j gains bf16(bf16(slope_h) * bf16(j)) * scale, as
HF's build_alibi_tensor rounds it) in the torch reference and the Triton kernels, over requests past 256 positions
(where bfloat16 rounds the positions themselves); BLOOM's and MPT's ALiBi (test_attention_alibi.py) unchanged.

Oracles: the torch reference against a brute-force loop over keys whose biases are HF's own bfloat16 expression; the
Triton kernels (interpreter on CPU, compiled on CUDA as `gpu` tests) and the attention backend against the torch
reference.  The pool's unused slot holds NaN (test_attention_window.py's Case).
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

from test_attention_window import DEVICES, HQ, Case, _triton_ops  # noqa: E402
from variant_checks import brute, check_backend_mixed_step  # noqa: E402

from radixlm.kernels import torch_ref  # noqa: E402

SLOPES = torch.tensor([2 ** -0.5, 2 ** -1.5, 0.3, 0.0])  # [Hq] not powers of two (their products round), one head none
SCALE = 1 / math.sqrt(8)
FALCON = {"alibi": SLOPES, "alibi_bf16": SCALE}
LENS, PREFIX, EXT = [300, 9, 1, 270], [290, 0, 5, 257], [10, 9, 1, 13]


def hf_biased(h, s, js):
    """Head h's logits as HF's Falcon makes them: its bfloat16 slope times the positions in bfloat16, over sqrt(d)."""
    alibi = SLOPES[h:h + 1].bfloat16() * torch.tensor(js)  # [n] bfloat16, as build_alibi_tensor
    return s + alibi.double() * SCALE


def _decode(kernel, device, **kw):
    case = Case(LENS, seed=1, device=device)
    q = torch.randn(len(LENS), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [B, Hq, D]
    seq = torch.tensor(LENS, dtype=torch.int32, device=device)
    return case, q, kernel(q, *case.tables(), seq, 0.2, **kw)  # [B, Hq, D]


def _extend(kernel, device, **kw):
    case = Case([p + e for p, e in zip(PREFIX, EXT)], seed=2, device=device)
    q = torch.randn(sum(EXT), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [T, Hq, D]
    args = (torch.tensor(PREFIX, device=device), torch.tensor(EXT, device=device), 0.2)
    return case, q, kernel(q, *case.tables(), *args, **kw)  # [T, Hq, D]


def test_torch_reference_against_hf_bfloat16_biases():
    case, q, out = _decode(torch_ref.decode_attention, "cpu", **FALCON)
    for b, n in enumerate(LENS):
        assert torch.allclose(out[b].double(), brute(case, q[b], b, n - 1, None, 0.2, hf_biased), atol=1e-5), b
    case, q, out = _extend(torch_ref.extend_attention, "cpu", **FALCON)
    t = 0
    for b, (prefix, ext) in enumerate(zip(PREFIX, EXT)):
        for i in range(ext):
            want = brute(case, q[t], b, prefix + i, None, 0.2, hf_biased)
            assert torch.allclose(out[t].double(), want, atol=1e-5), (b, i)
            t += 1


def test_rounding_changes_the_result():
    """The oracle is not vacuous: unrounded biases (BLOOM's ALiBi with the slopes times the scale) move every head with
    a slope, at decode and extend alike."""
    plain = {"alibi": SLOPES * SCALE}
    for run in (_decode, _extend):
        kernel = torch_ref.decode_attention if run is _decode else torch_ref.extend_attention
        falcon, unrounded = run(kernel, "cpu", **FALCON)[2], run(kernel, "cpu", **plain)[2]
        assert (falcon - unrounded)[:, :3].abs().amax(dim=(0, 2)).min() > 1e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_triton_decode(device, num_splits):
    ops = _triton_ops()
    kw = dict(FALCON, alibi=SLOPES.to(device))
    case, q, out = _decode(ops.decode_attention, device, num_splits=num_splits, **kw)
    ref = torch_ref.decode_attention(q, *case.tables(), torch.tensor(LENS, device=device), 0.2, **kw)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("device", DEVICES)
def test_triton_extend(device):
    ops = _triton_ops()
    kw = dict(FALCON, alibi=SLOPES.to(device))
    case, q, out = _extend(ops.extend_attention, device, **kw)
    args = (torch.tensor(PREFIX, device=device), torch.tensor(EXT, device=device), 0.2)
    ref = torch_ref.extend_attention(q, *case.tables(), *args, **kw)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_backend_layer_variants_with_falcon_alibi(backend):
    """Every layer with Falcon's ALiBi (layer 1 also windowed) in one mixed step; the cpu backend hands these layers to
    the torch reference."""
    check_backend_mixed_step(backend, FALCON, [FALCON] * 2)
