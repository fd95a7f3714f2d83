"""A decode step's shared prefix attended once for the whole batch (kernels/cpu_shared_prefix.py, merged by
radixlm_decode_attention_after) against the float64 reference of the whole attention.

Bounds: in float32 both parts are float32 throughout, so the merged result is within a few times the plain
native kernel's own float32 error.  In bfloat16 torch's flash kernel rounds the softmax weights and its
output to bfloat16 (each by at most 2^-9 relative), which moves an output by at most 2^-8 max|v| beyond the
plain kernel's error; a wrong start, prior or merge moves it by the values' own size.
"""

import pytest
import torch

from radixlm.kernels import cpu_native, cpu_shared_prefix, torch_ref
from radixlm.kernels.cpu_decode_step import DecodeStep
from radixlm.kernels.cpu_shared_prefix import MIN_BATCH, MIN_KEYS, MIN_WORK, SharedPrefix

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="no C compiler for the native kernels")


@pytest.fixture
def small_work(monkeypatch):
    """Batches of a few requests on a 320-key prefix take the shared path (the merge does not depend on where
    the threshold lies; find's own test checks it)."""
    monkeypatch.setattr(cpu_shared_prefix, "MIN_WORK", 1)


def _batch(batch, prefix, own_lens, hq, hkv, d, dtype, in_order, seed=0):
    """A pool and block table where every request's first `prefix` slots are the same ones, then its own."""
    g = torch.Generator().manual_seed(seed)
    slots_total = 4096
    perm = torch.randperm(slots_total, generator=g)
    shared = torch.arange(100, 100 + prefix) if in_order else perm[:prefix]
    free = perm[~torch.isin(perm, shared)]
    width = prefix + max(own_lens) + 3
    table = torch.zeros(batch + 2, width, dtype=torch.int32)
    rows = torch.randperm(batch + 2, generator=g)[:batch]
    taken = 0
    for r, n in zip(rows.tolist(), own_lens):
        table[r, :prefix] = shared.to(torch.int32)
        table[r, prefix:prefix + n] = free[taken:taken + n].to(torch.int32)
        taken += n
    k = torch.randn(slots_total, hkv, d, generator=g).to(dtype)
    v = torch.randn(slots_total, hkv, d, generator=g).to(dtype)
    qkv = torch.randn(batch, hq + 2 * hkv, d, generator=g).to(dtype)
    seq_lens = torch.tensor([prefix + n for n in own_lens])
    loc = torch.stack([table[r, n - 1] for r, n in zip(rows.tolist(), seq_lens.tolist())]).long()
    return k, v, qkv, table, rows, seq_lens, loc


def test_find_takes_the_longest_run_of_leading_slots_every_row_holds():
    prefix = MIN_WORK // 8 + 100                                 # 8 requests on it are enough work, 4 are not
    k, v, qkv, table, rows, seq_lens, loc = _batch(8, prefix, [5, 1, 40, 9, 2, 17, 3, 3], 9, 3, 64, torch.float32,
                                                   True)
    found = SharedPrefix.find(table, rows, seq_lens)
    assert found is not None and found.length == prefix and isinstance(found._keys, slice)
    table[rows[3], prefix - 50] += 1                             # one row leaves the run 50 keys early
    assert SharedPrefix.find(table, rows, seq_lens).length == prefix - 50
    table[rows[3], prefix - 150] += 1
    assert SharedPrefix.find(table, rows, seq_lens) is None      # 8 x (prefix - 150) < MIN_WORK
    table[rows[3], prefix - 150] -= 1
    table[rows[3], prefix - 50] -= 1
    assert SharedPrefix.find(table, rows[:4], seq_lens[:4]) is None   # too little work for 4 requests
    _, _, _, scattered, srows, slens, _ = _batch(MIN_BATCH, MIN_WORK // MIN_BATCH, [1, 2, 3, 4], 9, 3, 64,
                                                 torch.float32, False)
    found = SharedPrefix.find(scattered, srows, slens)
    assert found.length == MIN_WORK // MIN_BATCH and not isinstance(found._keys, slice)
    assert SharedPrefix.find(scattered, srows[:MIN_BATCH - 1], slens[:MIN_BATCH - 1]) is None   # too few requests


def test_short_prefixes_are_not_shared(small_work):
    _, _, _, table, rows, seq_lens, _ = _batch(16, MIN_KEYS - 1, [3] * 16, 9, 3, 64, torch.float32, True)
    assert SharedPrefix.find(table, rows, seq_lens) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,d", [(9, 3, 64), (8, 2, 64), (4, 4, 32)])
@pytest.mark.parametrize("in_order", [True, False])
def test_a_shared_prefix_attended_once_matches_the_whole_attention(dtype, hq, hkv, d, in_order, small_work):
    own = [1, 7, 40, 64, 65, 3]
    k, v, qkv, table, rows, seq_lens, loc = _batch(len(own), 320, own, hq, hkv, d, dtype, in_order, seed=hq + d)
    q, k_new, v_new = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
    k_ref, v_ref = k.clone(), v.clone()
    torch_ref.store_kv(k_ref, v_ref, loc, k_new, v_new)
    exact = torch_ref.decode_attention(q.double(), k_ref.double(), v_ref.double(), table, rows, seq_lens, 0.125)

    plain = DecodeStep(table, rows, seq_lens, loc)
    assert plain.shared is None
    want = plain.run(q, k_new, v_new, k.clone(), v.clone(), 0.125)
    step = DecodeStep(table, rows, seq_lens, loc, shared_prefix=SharedPrefix.find)
    assert step.shared is not None and step.shared.length == 320
    got = step.run(q, k_new, v_new, k, v, 0.125)
    assert torch.equal(k, k_ref) and torch.equal(v, v_ref)                    # the new tokens' K/V stored

    plain_err = (want.double() - exact).abs().max().item()
    err = (got.double() - exact).abs().max().item()
    floor = 16 * torch.finfo(torch.float32).eps * exact.abs().max().item()
    bound = 4 * plain_err + floor
    if dtype == torch.bfloat16:
        bound += 2.0 ** -8 * v_ref.float().abs().max().item()
    assert err <= bound, f"error {err:.3g} against float64, bound {bound:.3g} (plain kernel's {plain_err:.3g})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mixed_steps_decodes_share_their_prefix_too(dtype, small_work):
    """A step with decodes and a prefill chunk: the backend attends the decodes' shared prefix once; the whole
    step's output stays within the bound of the same step without it, both against float64."""
    import dataclasses

    from radixlm.kernels.dispatch import get_attention_ops
    from radixlm.runtime.attention_backend import KernelAttentionBackend
    from radixlm.runtime.forward_batch import ForwardBatch
    from radixlm.runtime.memory_pool import KVPool

    hq, hkv, d, prefix = 9, 3, 64, 300
    own = [4, 9, 1, 30, 6]                                   # the last request is a 6-token extend
    k, v, qkv, table, rows, seq_lens, loc = _batch(len(own), prefix, own, hq, hkv, d, dtype, True, seed=11)
    extend = 6
    prefix_lens = [prefix + n - 1 for n in own[:-1]] + [prefix + own[-1] - extend]
    ext_lens = [1] * (len(own) - 1) + [extend]
    locs = [int(table[r, p + e - 1]) for r, p, e in zip(rows.tolist()[:-1], prefix_lens, ext_lens)]
    locs += table[rows[-1], prefix_lens[-1]:prefix_lens[-1] + extend].tolist()
    fb = ForwardBatch.build([0] * sum(ext_lens), prefix_lens, ext_lens, rows.tolist(), locs, table)
    g = torch.Generator().manual_seed(12)
    q = torch.randn(sum(ext_lens), hq, d, generator=g).to(dtype)
    k_new, v_new = (torch.randn(sum(ext_lens), hkv, d, generator=g).to(dtype) for _ in range(2))
    outputs, pools = {}, {}
    for name, ops in (("shared", get_attention_ops("cpu")),
                      ("plain", dataclasses.replace(get_attention_ops("cpu"), shared_prefix=None))):
        pool = KVPool(1, k.shape[0], hkv, d, dtype=dtype)
        pool.k_buffers[0].copy_(k)
        pool.v_buffers[0].copy_(v)
        backend = KernelAttentionBackend(pool, 0.125, ops)
        backend.init_forward_metadata(fb)
        assert (backend._split[1].shared_prefix is not None) == (name == "shared")
        outputs[name] = backend.forward(q, k_new, v_new, 0, fb)
        pools[name] = pool
    kd, vd = pools["plain"].k_buffers[0].double(), pools["plain"].v_buffers[0].double()
    exact = torch_ref.extend_attention(q.double(), kd, vd, table, rows, torch.tensor(prefix_lens),
                                       torch.tensor(ext_lens), 0.125)
    plain_err = (outputs["plain"].double() - exact).abs().max().item()
    err = (outputs["shared"].double() - exact).abs().max().item()
    bound = 4 * plain_err + 16 * torch.finfo(torch.float32).eps * exact.abs().max().item()
    if dtype == torch.bfloat16:
        bound += 2.0 ** -8 * vd.abs().max().item()
    assert err <= bound, f"error {err:.3g} against float64, bound {bound:.3g} (without sharing {plain_err:.3g})"
