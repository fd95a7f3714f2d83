"""ALiBi (BLOOM, MPT: head h's score of key j for the query at position p gains slope_h * (j - p)) in the torch
reference and the Triton kernels, alone and with a sliding window; the attention backend's routing of ALiBi layers
(the native CPU kernels take none: the torch reference runs them).

Oracles: the torch reference against a brute-force loop over keys; the Triton kernels (interpreter on CPU, compiled
on CUDA as `gpu` tests) and the backend against the torch reference.  The pool's unused slot holds NaN
(tests/kernels/test_attention_window.py's Case), so a read past a window or a length shows.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

from test_attention_window import DEVICES, HKV, HQ, Case, _native, _triton_ops  # noqa: E402

from radixlm.kernels import torch_ref  # noqa: E402

WINDOWS = [None, 5]
SLOPES = torch.tensor([0.5, 0.25, 0.7, 0.0])  # [Hq] steep enough to move every softmax, one head without


def brute(case, q, b, pos, window, slopes, scale):
    """q [Hq, D] of request b at position pos -> [Hq, D] float64, one key at a time, each score biased."""
    row = int(case.rows[b])
    js = [j for j in range(pos + 1) if not window or j > pos - window]
    slots = case.table[row, js].long().cpu()
    dist = torch.tensor(js, dtype=torch.float64) - pos  # [n]
    out = torch.empty(HQ, q.shape[-1], dtype=torch.float64)
    for h in range(HQ):
        k = case.k.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
        v = case.v.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
        out[h] = torch.softmax(k @ q[h].double().cpu() * scale + float(slopes[h]) * dist, 0) @ v
    return out


@pytest.mark.parametrize("window", WINDOWS)
def test_torch_reference_against_brute_force(window):
    lens = [20, 9, 1]
    case = Case(lens)
    q = torch.randn(len(lens), HQ, case.k.shape[-1], generator=case.gen)  # [B, Hq, D]
    out = torch_ref.decode_attention(q, *case.tables(), torch.tensor(lens), 0.2, window=window, alibi=SLOPES)
    for b, n in enumerate(lens):
        assert torch.allclose(out[b].double(), brute(case, q[b], b, n - 1, window, SLOPES, 0.2), atol=1e-5)
    prefix, ext = [12, 0, 0], [8, 9, 1]
    q = torch.randn(sum(ext), HQ, case.k.shape[-1], generator=case.gen)  # [T, Hq, D]
    out = torch_ref.extend_attention(q, *case.tables(), torch.tensor(prefix), torch.tensor(ext), 0.2, window=window,
                                     alibi=SLOPES)
    t = 0
    for b in range(len(lens)):
        for i in range(ext[b]):
            assert torch.allclose(out[t].double(), brute(case, q[t], b, prefix[b] + i, window, SLOPES, 0.2),
                                  atol=1e-5), (b, i)
            t += 1


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
    ops = _triton_ops()
    lens = [40, 9, 1, 23]
    case = Case(lens, seed=1, device=device)
    q = torch.randn(len(lens), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [B, Hq, D]
    seq = torch.tensor(lens, dtype=torch.int32, device=device)
    slopes = SLOPES.to(device)
    out = ops.decode_attention(q, *case.tables(), seq, 0.2, num_splits=num_splits, window=window, alibi=slopes)
    ref = torch_ref.decode_attention(q, *case.tables(), seq, 0.2, window=window, alibi=slopes)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window", WINDOWS)
def test_triton_extend(device, window):
    ops = _triton_ops()
    prefix, ext = [30, 0, 5, 17], [9, 21, 1, 33]
    case = Case([p + e for p, e in zip(prefix, ext)], seed=2, device=device)
    q = torch.randn(sum(ext), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [T, Hq, D]
    args = (torch.tensor(prefix, device=device), torch.tensor(ext, device=device), 0.2)
    slopes = SLOPES.to(device)
    out = ops.extend_attention(q, *case.tables(), *args, window=window, alibi=slopes)
    ref = torch_ref.extend_attention(q, *case.tables(), *args, window=window, alibi=slopes)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_backend_layer_variants_with_alibi(backend):
    """Every layer with ALiBi (layer 1 also windowed), in one mixed step (two decodes and an extend); the cpu
    backend hands these layers to the torch reference."""
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool

    if backend == "cpu":
        _native()
    d = 64
    pool = KVPool(2, 200, HKV, d)
    be = create_attention_backend(backend, pool, 0.2)
    be.set_layer_variants([None, 6], alibi=SLOPES)
    gen = torch.Generator().manual_seed(4)
    table = torch.zeros(3, 64, dtype=torch.int32)  # [R, C]
    table[:, :40] = torch.randperm(200, generator=gen)[:120].to(torch.int32).view(3, 40)
    for buf in pool.k_buffers + pool.v_buffers:
        buf.copy_(torch.randn(buf.shape, generator=gen))
    prefix, ext, rows = [30, 12, 20], [1, 1, 10], [0, 1, 2]
    locs = [int(table[r, p + i]) for r, p, e in zip(rows, prefix, ext) for i in range(e)]
    fb = ForwardBatch.build([0] * 12, prefix, ext, rows, locs, table)
    q = torch.randn(12, HQ, d, generator=gen)  # [T, Hq, D]
    k, v = torch.randn(12, HKV, d, generator=gen), torch.randn(12, HKV, d, generator=gen)  # [T, Hkv, D]
    be.init_forward_metadata(fb)
    for layer, window in ((0, None), (1, 6)):
        out = be.forward(q, k, v, layer, fb)  # [T, Hq, D]
        kb, vb = pool.k_buffers[layer], pool.v_buffers[layer]
        ref_dec = torch_ref.decode_attention(q[:2], kb, vb, table, torch.tensor([0, 1]), torch.tensor([31, 13]), 0.2,
                                             window=window, alibi=SLOPES)
        ref_ext = torch_ref.extend_attention(q[2:], kb, vb, table, torch.tensor([2]), torch.tensor([20]),
                                             torch.tensor([10]), 0.2, window=window, alibi=SLOPES)
        assert (out[:2] - ref_dec).abs().max().item() < 1e-4 and (out[2:] - ref_ext).abs().max().item() < 1e-4, layer
