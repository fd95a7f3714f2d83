"""A decode step's shared prefix attended once for the whole batch (radixlm_kernels/cpu_shared_prefix.py, merged by
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
@pytest.mark.parametrize("path", ["fma-loops", "pair-products", "torch-flash"])
@pytest.mark.parametrize("batch,hq,hkv,d,prefix", [(16, 9, 3, 64, 1000), (5, 8, 2, 64, 37), (3, 4, 4, 32, 300)])
def test_attend_gives_each_rows_attention_and_log_sum_exp(dtype, path, batch, hq, hkv, d, prefix, monkeypatch):
    """attend's products, each forced: the FMA loops (where they take the head dim; bfloat16 widened), their
    AVX512-BF16 pair products (bfloat16, where the CPU has them) and torch's flash kernel, against float64.  The
    FMA loops widen bfloat16 exactly and compute in float32, so in both dtypes they stay within a few times the
    float32 error of torch's own float32 softmax attention; the pair products' scores are float32 sums of exact
    products too, but they round the weights to bfloat16, as torch's bfloat16 kernel does, which also rounds its
    output (2^-8 max|v| on the output, 2^-9 on the log-sum-exp)."""
    from radixlm.kernels import cpu_packed

    packed = path != "torch-flash"
    if packed and not cpu_packed.f32_extend_available(d):
        pytest.skip(f"the FMA loops do not take head dim {d} on this CPU's vector width")
    if path == "pair-products" and not (dtype == torch.bfloat16 and cpu_packed.dp_extend_available(d)):
        pytest.skip("pair products take bfloat16 on a CPU with AVX512-BF16, head dim a multiple of 64")
    monkeypatch.setattr(cpu_shared_prefix, "_packed_loops", lambda *args: packed)
    monkeypatch.setattr(cpu_shared_prefix, "BF16_MODE", -1 if path == "pair-products" else 1)
    k, v, qkv, table, rows, _, _ = _batch(batch, prefix, [1] * batch, hq, hkv, d, dtype, False, seed=batch + d)
    q = qkv[:, :hq]                                                          # a view: rows hq + 2 hkv heads apart
    shared = SharedPrefix(table[rows[0], :prefix].to(torch.int64), batch)
    o, lse = shared.attend(q, k, v, 0.125)
    assert o.shape == (batch, hq, d) and lse.shape == (batch, hq) and o.dtype == lse.dtype == torch.float32

    keys = k[shared.slots].repeat_interleave(hq // hkv, 1)                 # [P, Hq, D]
    values = v[shared.slots].repeat_interleave(hq // hkv, 1)

    def exact_and_float32(t):
        scores = torch.einsum("bhd,phd->bhp", q.to(t), keys.to(t)) * 0.125
        return torch.einsum("bhp,phd->bhd", scores.softmax(-1), values.to(t)), scores.logsumexp(-1)

    (o64, lse64), (o32, lse32) = exact_and_float32(torch.float64), exact_and_float32(torch.float32)
    floor = 16 * torch.finfo(torch.float32).eps
    o_bound = 4 * (o32.double() - o64).abs().max().item() + floor * values.abs().max().item()
    lse_bound = 4 * (lse32.double() - lse64).abs().max().item() + floor * lse64.abs().max().item()
    if dtype == torch.bfloat16 and path != "fma-loops":
        o_bound += 2.0 ** -8 * values.float().abs().max().item()
        if path == "torch-flash":       # an error d scales the prefix's weight by e^d: the weights' own rounding
            lse_bound += 2.0 ** -9
    o_err, lse_err = (o.double() - o64).abs().max().item(), (lse.double() - lse64).abs().max().item()
    assert o_err <= o_bound, f"output error {o_err:.3g} against float64, bound {o_bound:.3g}"
    assert lse_err <= lse_bound, f"log-sum-exp error {lse_err:.3g} against float64, bound {lse_bound:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_mixed_steps_decodes_share_their_prefix_too(dtype, small_work):
    """A step with decodes and a prefill chunk: the backend attends the decodes' shared prefix once; the whole
    step's output stays within the bound of the same step without it, both against float64."""
    import dataclasses

    from radixlm.kernels.dispatch import get_attention_ops
    from radixlm.runtime.runner.attention_backend import KernelAttentionBackend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("in_order", [True, False])
def test_an_extends_requests_attend_their_shared_cached_prefix_once(dtype, in_order, small_work):
    """An extend step of chat turns on one cached system prompt: the prompt's keys attended once for every new
    token, each request's own cached keys and new tokens after it (radixlm_extend_attention_after), against
    float64; within the bound of the same extend without sharing (bfloat16: the shared product's rounding, as
    for decodes)."""
    from radixlm.kernels import cpu_extend

    hq, hkv, d, prefix = 9, 3, 64, 300
    cached, ext = [0, 5, 30, 2, 11], [26, 1, 40, 7, 63]
    k, v, _, table, rows, _, _ = _batch(len(ext), prefix, [c + e for c, e in zip(cached, ext)], hq, hkv, d, dtype,
                                        in_order, seed=21)
    prefix_lens = torch.tensor([prefix + c for c in cached])
    ext_lens = torch.tensor(ext)
    q = torch.randn(sum(ext), hq, d, generator=torch.Generator().manual_seed(22)).to(dtype)
    shared = SharedPrefix.find_for_extend(table, rows, prefix_lens, ext_lens)
    assert shared is not None and shared.length == prefix and shared.starts.tolist() == [prefix] * len(ext)
    assert SharedPrefix.find_for_extend(table, rows[:1], prefix_lens[:1], ext_lens[:1]) is None   # nothing to share
    exact = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, prefix_lens, ext_lens, 0.125)
    plain = cpu_native.extend_attention(q, k, v, table, rows, prefix_lens, ext_lens, 0.125)
    plain_err = (plain.double() - exact).abs().max().item()
    bound = 4 * plain_err + 16 * torch.finfo(torch.float32).eps * exact.abs().max().item()
    if dtype == torch.bfloat16:
        bound += 2.0 ** -8 * v.float().abs().max().item()
    # the native kernel itself, and the router, which takes it where every request goes to the native kernel
    for got in (cpu_native.extend_attention(q, k, v, table, rows, prefix_lens, ext_lens, 0.125, shared=shared),
                cpu_extend.extend_attention(q, k, v, table, rows, prefix_lens, ext_lens, 0.125, shared=shared)):
        err = (got.double() - exact).abs().max().item()
        assert err <= bound, f"error {err:.3g} against float64, bound {bound:.3g} (without sharing {plain_err:.3g})"


def test_the_cpu_backend_finds_an_extend_steps_shared_prefix(small_work):
    """The backend looks for it once per extend step and hands it to every layer's extend."""
    import dataclasses

    from radixlm.kernels.dispatch import get_attention_ops
    from radixlm.runtime.runner.attention_backend import KernelAttentionBackend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool

    hq, hkv, d, prefix = 9, 3, 64, 300
    ext = [3, 9, 20]
    k, v, _, table, rows, _, _ = _batch(len(ext), prefix, ext, hq, hkv, d, torch.float32, True, seed=31)
    locs = [int(s) for r, e in zip(rows.tolist(), ext) for s in table[r, prefix:prefix + e]]
    fb = ForwardBatch.build([0] * sum(ext), [prefix] * len(ext), ext, rows.tolist(), locs, table)
    pool = KVPool(1, k.shape[0], hkv, d, dtype=torch.float32)
    pool.k_buffers[0].copy_(k)
    pool.v_buffers[0].copy_(v)
    g = torch.Generator().manual_seed(32)
    q = torch.randn(sum(ext), hq, d, generator=g)
    k_new, v_new = (torch.randn(sum(ext), hkv, d, generator=g) for _ in range(2))
    outputs = {}
    for name, ops in (("shared", get_attention_ops("cpu")),
                      ("plain", dataclasses.replace(get_attention_ops("cpu"), extend_shared_prefix=None))):
        pool = KVPool(1, k.shape[0], hkv, d, dtype=torch.float32)
        pool.k_buffers[0].copy_(k)
        pool.v_buffers[0].copy_(v)
        backend = KernelAttentionBackend(pool, 0.125, ops)
        backend.init_forward_metadata(fb)
        assert (backend._extend_shared is not None) == (name == "shared")
        outputs[name] = backend.forward(q, k_new, v_new, 0, fb)
    kd, vd = pool.k_buffers[0].double(), pool.v_buffers[0].double()
    exact = torch_ref.extend_attention(q.double(), kd, vd, table, rows, torch.tensor([prefix] * len(ext)),
                                       torch.tensor(ext), 0.125)
    plain_err = (outputs["plain"].double() - exact).abs().max().item()
    err = (outputs["shared"].double() - exact).abs().max().item()
    bound = 4 * plain_err + 16 * torch.finfo(torch.float32).eps * exact.abs().max().item()
    assert err <= bound, f"error {err:.3g} against float64, bound {bound:.3g} (without sharing {plain_err:.3g})"
