"""The checks that every per-head attention variant (sinks, ALiBi) runs in each kernel, given as keyword arguments
`extra` of torch_ref's kernels: the torch reference against a brute-force loop over keys, the Triton kernels against
the torch reference, and the attention backend's mixed step (two decodes and an extend) against the torch reference.
The cases are test_attention_window.py's (a pool whose unused slot holds NaN)."""

import torch
from test_attention_window import HKV, HQ, Case, _native, _triton_ops

from radixlm.kernels import torch_ref


def brute(case, q, b, pos, window, scale, scores):
    """q [Hq, D] of request b at position pos -> [Hq, D] float64, one key at a time: scores(h, s, js) -> head h's
    softmax logits from its plain scores s [n] of the keys at positions js, [n] (and any logits after those that
    take no value: sinks)."""
    row = int(case.rows[b])
    js = [j for j in range(pos + 1) if not window or j > pos - window]
    slots = case.table[row, js].long().cpu()
    out = torch.empty(HQ, q.shape[-1], dtype=torch.float64)
    for h in range(HQ):
        k = case.k.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
        v = case.v.cpu()[slots, h // (HQ // HKV)].double()  # [n, D]
        s = scores(h, k @ q[h].double().cpu() * scale, js)  # [n (+ sinks)]
        out[h] = torch.softmax(s, 0)[:len(js)] @ v
    return out


def check_reference_against_brute(window, scores, **extra):
    """torch_ref's decode and extend with `extra` against brute(..., scores) at every query."""
    lens = [20, 9, 1]
    case = Case(lens)
    q = torch.randn(len(lens), HQ, case.k.shape[-1], generator=case.gen)  # [B, Hq, D]
    out = torch_ref.decode_attention(q, *case.tables(), torch.tensor(lens), 0.2, window=window, **extra)
    for b, n in enumerate(lens):
        assert torch.allclose(out[b].double(), brute(case, q[b], b, n - 1, window, 0.2, scores), atol=1e-5)
    prefix, ext = [12, 0, 0], [8, 9, 1]
    q = torch.randn(sum(ext), HQ, case.k.shape[-1], generator=case.gen)  # [T, Hq, D]
    out = torch_ref.extend_attention(q, *case.tables(), torch.tensor(prefix), torch.tensor(ext), 0.2, window=window,
                                     **extra)
    t = 0
    for b in range(len(lens)):
        for i in range(ext[b]):
            assert torch.allclose(out[t].double(), brute(case, q[t], b, prefix[b] + i, window, 0.2, scores),
                                  atol=1e-5), (b, i)
            t += 1


def check_triton_decode(device, window, num_splits, **extra):
    """Triton's decode with `extra` (tensors moved to `device`) against the torch reference."""
    ops = _triton_ops()
    lens = [40, 9, 1, 23]
    case = Case(lens, seed=1, device=device)
    q = torch.randn(len(lens), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [B, Hq, D]
    seq = torch.tensor(lens, dtype=torch.int32, device=device)
    extra = {name: t.to(device) for name, t in extra.items()}
    out = ops.decode_attention(q, *case.tables(), seq, 0.2, num_splits=num_splits, window=window, **extra)
    ref = torch_ref.decode_attention(q, *case.tables(), seq, 0.2, window=window, **extra)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


def check_triton_extend(device, window, **extra):
    """Triton's extend with `extra` (tensors moved to `device`) against the torch reference."""
    ops = _triton_ops()
    prefix, ext = [30, 0, 5, 17], [9, 21, 1, 33]
    case = Case([p + e for p, e in zip(prefix, ext)], seed=2, device=device)
    q = torch.randn(sum(ext), HQ, case.k.shape[-1], generator=case.gen).to(device)  # [T, Hq, D]
    args = (torch.tensor(prefix, device=device), torch.tensor(ext, device=device), 0.2)
    extra = {name: t.to(device) for name, t in extra.items()}
    out = ops.extend_attention(q, *case.tables(), *args, window=window, **extra)
    ref = torch_ref.extend_attention(q, *case.tables(), *args, window=window, **extra)
    assert torch.isfinite(out).all() and (out - ref).abs().max().item() < 2e-3


def check_backend_mixed_step(backend, variants, layer_extras):
    """Two layers (layer 0 full, layer 1 windowed by 6) declared with set_layer_variants([None, 6], **variants), in one
    mixed step (two decodes and an extend), against the torch reference with layer_extras[layer]'s keywords."""
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool

    if backend == "cpu":
        _native()
    d = 64
    pool = KVPool(2, 200, HKV, d)
    be = create_attention_backend(backend, pool, 0.2)
    be.set_layer_variants([None, 6], **variants)
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
        extra = layer_extras[layer]
        ref_dec = torch_ref.decode_attention(q[:2], kb, vb, table, torch.tensor([0, 1]), torch.tensor([31, 13]), 0.2,
                                             window=window, **extra)
        ref_ext = torch_ref.extend_attention(q[2:], kb, vb, table, torch.tensor([2]), torch.tensor([20]),
                                             torch.tensor([10]), 0.2, window=window, **extra)
        assert (out[:2] - ref_dec).abs().max().item() < 1e-4 and (out[2:] - ref_ext).abs().max().item() < 1e-4, layer
