"""Sliding-window attention and score soft-capping (Gemma 2/3, Phi-3) in every attention kernel.

Oracles: the torch reference against a brute-force loop over keys (softmax of capped scores over the
positions p - window < j <= p); the Triton kernels (interpreter on CPU, compiled on CUDA as `gpu` tests),
the native CPU decode over a gathered window and the attention backend's fallbacks against the torch
reference.  A pool filled with NaN outside the requests' keys shows any read past a window or a length.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

from radixlm.kernels import dispatch, torch_ref  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
HQ, HKV, D = 4, 2, 64
VARIANTS = [(None, None), (5, None), (None, 2.5), (7, 3.0), (1, None)]   # (window, softcap)
VARIANT_IDS = [f"w{w}-cap{c}" for w, c in VARIANTS]


def _triton_ops():
    if not (HAS_CUDA or dispatch.triton_interpreter_enabled()):
        pytest.skip("triton needs CUDA or TRITON_INTERPRET=1 before its first import")
    pytest.importorskip("triton")
    ops = dispatch._triton_ops()
    if not HAS_CUDA and not dispatch._kernels_interpreted():
        pytest.skip("triton kernels were imported without the interpreter")
    return ops


DEVICES = [pytest.param("cpu", marks=pytest.mark.skipif(HAS_CUDA, reason="with CUDA the kernels are compiled for it")),
           pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")])]


class Case:
    """Requests of lengths `lens` in shuffled rows and slots of a pool whose unused slots hold NaN."""

    def __init__(self, lens, seed=0, device="cpu"):
        gen = torch.Generator().manual_seed(seed)
        total = sum(lens)
        self.k = torch.randn(total + 1, HKV, D, generator=gen)  # [S, Hkv, D], last slot NaN
        self.v = torch.randn(total + 1, HKV, D, generator=gen)  # [S, Hkv, D]
        self.k[total] = self.v[total] = float("nan")
        self.table = torch.full((len(lens) + 1, max(lens) + 4), total, dtype=torch.int32)  # [R, C]
        slots = torch.randperm(total, generator=gen).to(torch.int32)  # [S-1]
        rows = torch.randperm(len(lens) + 1, generator=gen)[:len(lens)]  # [B]
        used = 0
        for row, n in zip(rows.tolist(), lens):
            self.table[row, :n] = slots[used:used + n]
            used += n
        self.rows = rows  # [B]
        self.gen = gen
        self.device = device
        for name in ("k", "v", "table", "rows"):
            setattr(self, name, getattr(self, name).to(device))

    def tables(self):
        return self.k, self.v, self.table, self.rows

    def brute(self, q, b, pos, window, softcap, scale):
        """q [Hq, D] of request b at position pos -> [Hq, D], one key at a time."""
        row = int(self.rows[b])
        js = [j for j in range(pos + 1) if not window or j > pos - window]
        slots = self.table[row, js].long().cpu()
        out = torch.empty(HQ, D, dtype=torch.float64)
        for h in range(HQ):
            k = self.k.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
            v = self.v.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
            s = k @ q[h].double().cpu() * scale  # [n]
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            out[h] = torch.softmax(s, 0) @ v
        return out


@pytest.mark.parametrize("window,softcap", VARIANTS, ids=VARIANT_IDS)
def test_torch_reference_against_brute_force(window, softcap):
    lens = [20, 9, 1]
    case = Case(lens)
    q = torch.randn(len(lens), HQ, D, generator=case.gen)  # [B, Hq, D]
    seq = torch.tensor(lens)
    out = torch_ref.decode_attention(q, *case.tables(), seq, 0.2, window=window, softcap=softcap)
    for b, n in enumerate(lens):
        assert torch.allclose(out[b].double(), case.brute(q[b], b, n - 1, window, softcap, 0.2), atol=1e-5)
    prefix, ext = [12, 0, 0], [8, 9, 1]
    q = torch.randn(sum(ext), HQ, D, generator=case.gen)  # [T, Hq, D]
    out = torch_ref.extend_attention(q, *case.tables(), torch.tensor(prefix), torch.tensor(ext), 0.2,
                                     window=window, softcap=softcap)
    t = 0
    for b in range(len(lens)):
        for i in range(ext[b]):
            want = case.brute(q[t], b, prefix[b] + i, window, softcap, 0.2)
            assert torch.allclose(out[t].double(), want, atol=1e-5), (b, i)
            t += 1


def test_window_changes_the_result():
    """The oracle is not vacuous: a window shorter than the context changes the output."""
    case = Case([20])
    q = torch.randn(1, HQ, D, generator=case.gen)  # [1, Hq, D]
    full = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2)
    windowed = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2, window=5)
    capped = torch_ref.decode_attention(q, *case.tables(), torch.tensor([20]), 0.2, softcap=0.5)
    assert (full - windowed).abs().max() > 1e-2 and (full - capped).abs().max() > 1e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window,softcap", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("num_splits", [1, 4])
def test_triton_decode(device, window, softcap, num_splits):
    ops = _triton_ops()
    lens = [40, 9, 1, 23]
    case = Case(lens, seed=1, device=device)
    q = torch.randn(len(lens), HQ, D, generator=case.gen).to(device)  # [B, Hq, D]
    seq = torch.tensor(lens, dtype=torch.int32, device=device)
    out = ops.decode_attention(q, *case.tables(), seq, 0.2, num_splits=num_splits, window=window, softcap=softcap)
    ref = torch_ref.decode_attention(q, *case.tables(), seq, 0.2, window=window, softcap=softcap)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window,softcap", VARIANTS, ids=VARIANT_IDS)
def test_triton_extend(device, window, softcap):
    ops = _triton_ops()
    prefix, ext = [30, 0, 5, 17], [9, 21, 1, 33]
    case = Case([p + e for p, e in zip(prefix, ext)], seed=2, device=device)
    q = torch.randn(sum(ext), HQ, D, generator=case.gen).to(device)  # [T, Hq, D]
    args = (torch.tensor(prefix, device=device), torch.tensor(ext, device=device), 0.2)
    out = ops.extend_attention(q, *case.tables(), *args, window=window, softcap=softcap)
    ref = torch_ref.extend_attention(q, *case.tables(), *args, window=window, softcap=softcap)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


def _native():
    from radixlm.kernels import cpu_native

    if not cpu_native.available():
        pytest.skip(f"native CPU kernels unavailable: {cpu_native.unavailable_reason()}")


@pytest.mark.parametrize("window,softcap", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ext", [[9, 21, 1], [3, 8, 1]])
def test_cpu_window_kernels(window, softcap, per_token, dtype, ext):
    """The native decode over a gathered window (decode, and short extends one query per token) and its fallbacks."""
    from radixlm.kernels import cpu_window

    _native()
    prefix = [30, 0, 5]
    case = Case([p + e for p, e in zip(prefix, ext)], seed=3)
    k, v, table, rows = case.tables()
    k, v = k.to(dtype), v.to(dtype)
    q = torch.randn(sum(ext), HQ, D, generator=case.gen).to(dtype)  # [T, Hq, D]
    args = (torch.tensor(prefix), torch.tensor(ext), 0.2)
    out = cpu_window.extend_attention(q, k, v, table, rows, *args, window=window, softcap=softcap, per_token=per_token)
    ref = torch_ref.extend_attention(q.float(), k.float(), v.float(), table, rows, *args, window=window,
                                     softcap=softcap)
    tol = 2e-3 if dtype == torch.float32 else 3e-2
    assert torch.isfinite(out).all() and (out.float() - ref).abs().max().item() < tol
    seq = torch.tensor([p + e for p, e in zip(prefix, ext)])
    qd = q[:3]  # [3, Hq, D]
    out = cpu_window.decode_attention(qd, k, v, table, rows, seq, 0.2, window=window, softcap=softcap)
    ref = torch_ref.decode_attention(qd.float(), k.float(), v.float(), table, rows, seq, 0.2, window=window,
                                     softcap=softcap)
    assert torch.isfinite(out).all() and (out.float() - ref).abs().max().item() < tol


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("softcap", [None, 2.0])
def test_backend_layer_variants(backend, softcap):
    """A backend with set_layer_variants runs layer 1 windowed (and every layer capped when softcap is set), an
    unvaried layer 0 exactly as before, in one mixed step (two decodes and an extend)."""
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool

    if backend == "cpu":
        _native()
    pool = KVPool(2, 200, HKV, D)
    plain = create_attention_backend(backend, pool, 0.2)
    varied = create_attention_backend(backend, pool, 0.2)
    varied.set_layer_variants([None, 6], softcap=softcap)
    variant = varied.layer_variants[1]
    gen = torch.Generator().manual_seed(4)
    table = torch.zeros(3, 64, dtype=torch.int32)  # [R, C]
    slots = torch.randperm(200, generator=gen)[:120].to(torch.int32)
    table[:, :40] = slots.view(3, 40)
    for buf in pool.k_buffers + pool.v_buffers:
        buf.copy_(torch.randn(buf.shape, generator=gen))
    # a mixed step: two decodes (at 30 and 12) and an extend of 10 after 20 cached tokens
    prefix, ext, rows = [30, 12, 20], [1, 1, 10], [0, 1, 2]
    locs = [int(table[r, p + i]) for r, p, e in zip(rows, prefix, ext) for i in range(e)]
    fb = ForwardBatch.build([0] * 12, prefix, ext, rows, locs, table)
    q = torch.randn(12, HQ, D, generator=gen)  # [T, Hq, D]
    k, v = torch.randn(12, HKV, D, generator=gen), torch.randn(12, HKV, D, generator=gen)  # [T, Hkv, D]
    for be in (plain, varied):
        be.init_forward_metadata(fb)
    if softcap is None:
        assert torch.equal(varied.forward(q, k, v, 0, fb), plain.forward(q, k, v, 0, fb))  # layer 0 untouched
    else:
        assert varied.layer_variants[0] == {"window": None, "softcap": softcap}
    out = varied.forward(q, k, v, 1, fb)  # [T, Hq, D]
    lens = torch.tensor([31, 13])
    ref_dec = torch_ref.decode_attention(q[:2], pool.k_buffers[1], pool.v_buffers[1], table, torch.tensor([0, 1]),
                                         lens, 0.2, **variant)
    ref_ext = torch_ref.extend_attention(q[2:], pool.k_buffers[1], pool.v_buffers[1], table, torch.tensor([2]),
                                         torch.tensor([20]), torch.tensor([10]), 0.2, **variant)
    assert (out[:2] - ref_dec).abs().max().item() < 1e-4 and (out[2:] - ref_ext).abs().max().item() < 1e-4
    assert (out - plain.forward(q, k, v, 1, fb)).abs().max().item() > 1e-3  # the variant did something
