"""A step's host-side metadata: ForwardBatch.build's tensors against its lists, the CPU path of the
step-input stager, and the attention backend handing extend kernels that take it the longest
extend and start offsets computed once per step (the same objects at every layer; the values of a
brute-force recount), so no layer reads them back from the device."""

import torch

from radixlm.kernels import torch_ref
from radixlm.kernels.dispatch import AttentionOps
from radixlm.runtime.runner.attention_backend import KernelAttentionBackend
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool
from radixlm.runtime.runner.step_inputs import StepInputStager


def test_build_tensors_equal_the_lists():
    table = torch.zeros((4, 32), dtype=torch.int32)  # [R, C]
    fb = ForwardBatch.build([1, 2, 3, 4, 5, 6], [0, 7, 3], [3, 1, 2], [2, 0, 1], [10, 11, 12, 13, 14, 15], table)
    assert fb.positions.tolist() == [0, 1, 2, 7, 3, 4]
    assert fb.seq_lens.tolist() == [3, 8, 5] and fb.extend_start.tolist() == [0, 3, 4]
    assert fb.logits_indices.tolist() == [2, 3, 5] and fb.max_extend_len == 3
    assert all(t.dtype == torch.int64 for t in (fb.input_ids, fb.seq_lens, fb.extend_start))
    staged = ForwardBatch.build([1, 2, 3, 4, 5, 6], [0, 7, 3], [3, 1, 2], [2, 0, 1], [10, 11, 12, 13, 14, 15],
                                table, stager=StepInputStager("cpu"))
    for name in ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens", "logits_indices",
                 "extend_start"):
        assert torch.equal(getattr(staged, name), getattr(fb, name)), name


def test_stager_on_cpu_makes_plain_tensors():
    out = StepInputStager("cpu").to_device([[1, 2], [], [3]])
    assert [t.tolist() for t in out] == [[1, 2], [], [3]] and all(t.device.type == "cpu" for t in out)


def _recording_backend(pool, calls):
    def extend(q, kb, vb, r2t, rows, prefix, ext, scale, max_extend_len, extend_start):
        calls.append((max_extend_len, extend_start, ext.tolist()))
        return torch_ref.extend_attention(q, kb, vb, r2t, rows, prefix, ext, scale)

    ops = AttentionOps("recording", torch_ref.store_kv, torch_ref.decode_attention, extend, takes_step_metadata=True)
    return KernelAttentionBackend(pool, 0.125, ops)


def test_backend_hands_per_step_metadata_to_extend():
    """A mixed step (decodes split from extends) and a pure extend, over three layers."""
    gen = torch.Generator().manual_seed(3)
    pool = KVPool(3, 64, 1, 16)
    table = torch.arange(4 * 16, dtype=torch.int32).view(4, 16)  # [R, C]: row r holds slots 16r..
    calls = []
    backend = _recording_backend(pool, calls)
    ref = KernelAttentionBackend(pool, 0.125, AttentionOps("torch", torch_ref.store_kv, torch_ref.decode_attention,
                                                           torch_ref.extend_attention))
    prefix, extend, rows = [2, 0, 5, 3], [1, 4, 1, 3], [0, 1, 2, 3]
    loc = [r * 16 + p + i for r, p, e in zip(rows, prefix, extend) for i in range(e)]
    fb = ForwardBatch.build(list(range(9)), prefix, extend, rows, loc, table)
    for b in (backend, ref):
        b.init_forward_metadata(fb)
    for layer in range(3):
        q, k, v = (torch.randn(9, 1, 16, generator=gen) for _ in range(3))  # [T, H, D] each
        assert torch.equal(backend.forward(q, k, v, layer, fb), ref.forward(q, k, v, layer, fb))
    assert len(calls) == 3 and all(c[1] is calls[0][1] for c in calls)       # made once, reused per layer
    assert calls[0][0] == 4 and calls[0][2] == [4, 3] and calls[0][1].tolist() == [0, 4]
    calls.clear()
    fb = ForwardBatch.build(list(range(7)), [0, 2], [4, 3], [1, 3], [16, 17, 18, 19, 50, 51, 52], table)
    backend.init_forward_metadata(fb)
    backend.forward(*(torch.randn(7, 1, 16, generator=gen) for _ in range(3)), 0, fb)
    assert calls[0][0] == 4 and calls[0][1] is fb.extend_start and fb.extend_start.tolist() == [0, 4]
