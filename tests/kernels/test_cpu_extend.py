"""Batched CPU extend attention (radixlm_kernels/cpu_extend.py) against the torch reference."""

import pytest
import torch

from radixlm.kernels import cpu_extend, cpu_flash_extend, cpu_native, cpu_packed, dispatch, torch_ref

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="no C compiler for the native kernel")


def _batch(prefix, ext, num_q_heads, num_kv_heads, head_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    num_slots, width = 8192, max(p + e for p, e in zip(prefix, ext)) + 3
    k = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    rows = torch.randperm(len(prefix) + 2, generator=g)[:len(prefix)]
    table = torch.randint(0, num_slots, (len(prefix) + 2, width), generator=g, dtype=torch.int32)
    q = torch.randn(sum(ext), num_q_heads, head_dim, generator=g).to(dtype)
    return q, k, v, table, rows, torch.tensor(prefix), torch.tensor(ext)


@pytest.mark.parametrize("heads", [(9, 3, 64), (4, 4, 32), (8, 2, 20)])
@pytest.mark.parametrize("prefix,ext", [
    ([0], [1]), ([0, 7, 30], [5, 1, 12]), ([100, 0, 3, 64], [3, 0, 40, 1]),
    ([1500, 2], [33, 16]), ([0, 9], [17, 255]),                 # tiles of 16 new tokens: whole, partial, one
    ([0, 20, 5], [259, 4, 256]),                                # prefill chunks (flash) beside a short one
    ([1000, 3, 700], [40, 2, 1]),                               # many new tokens on a long prefix (flash), small
])
def test_matches_reference_float32(heads, prefix, ext):
    q, k, v, table, rows, p, e = _batch(prefix, ext, *heads, torch.float32)
    want = torch_ref.extend_attention(q, k, v, table, rows, p, e, heads[2] ** -0.5)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, heads[2] ** -0.5)
    assert got.shape == want.shape and (got - want).abs().max().item() < 2e-5


def test_flash_reads_shared_kv_heads_as_the_repeated_heads_give(monkeypatch):
    """The causal flash call takes K/V heads shared by G query heads as they are; a torch whose kernel
    cannot is given them repeated: both give the same bits."""
    q, k, v, table, rows, p, e = _batch([0, 40], [300, 280], 9, 3, 64, torch.bfloat16, seed=5)
    native = cpu_flash_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    assert cpu_flash_extend._gqa["native"]
    monkeypatch.setitem(cpu_flash_extend._gqa, "native", False)
    assert torch.equal(cpu_flash_extend.extend_attention(q, k, v, table, rows, p, e, 0.125), native)


@pytest.mark.parametrize("amx", [True, False])
def test_bfloat16_matches_reference_with_and_without_the_tile_unit(monkeypatch, amx):
    """bfloat16 extends of every size, through the AMX kernel where the CPU has one, and as on a CPU without
    (forced here, so both paths stay covered on an AMX machine): a packed FMA kernel from 32 or 64 new tokens,
    the native one below."""
    if amx and not cpu_packed.amx_extend_available(64):
        pytest.skip("no AMX-BF16 tile unit on this CPU")
    if not amx:
        monkeypatch.setattr(cpu_packed, "amx_extend_available", lambda head_dim: False)
    q, k, v, table, rows, p, e = _batch([0, 20, 5, 1000], [259, 4, 256, 40], 9, 3, 64, torch.bfloat16, seed=8)
    want = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, p, e, 0.125)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    assert got.dtype == torch.bfloat16 and (got.double() - want).abs().max().item() < 3e-2


def test_matches_reference_bfloat16_into_out():
    q, k, v, table, rows, p, e = _batch([0, 33, 300], [17, 2, 9], 9, 3, 64, torch.bfloat16, seed=3)
    want = torch_ref.extend_attention(q, k, v, table, rows, p, e, 0.125)
    out = torch.full_like(q, float("nan"))
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125, out=out)
    assert got is out and out.dtype == torch.bfloat16
    assert (out.float() - want.float()).abs().max().item() < 3e-2


def _record_kernels(monkeypatch):
    calls = []
    for module, name in ((cpu_native, "extend_attention"), (cpu_flash_extend, "extend_attention"),
                         (cpu_packed, "f32_extend_attention"), (cpu_packed, "bf16_extend_attention"),
                         (cpu_packed, "dp_extend_attention")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name if module is not cpu_flash_extend else "flash",
                            **k: calls.append((_name, a[6].tolist())) or _real(*a, **k))
    return calls


@pytest.mark.parametrize("amx", [True, False])
def test_each_request_goes_to_the_kernel_its_work_suits(monkeypatch, amx):
    """float32: requests of 16+ new tokens to the packed FMA kernel where the CPU has AMX, of 64+ where it has
    not (forced both ways: the float32 kernel runs on either), the others to the native one."""
    monkeypatch.setattr(cpu_packed, "amx_extend_available", lambda head_dim: amx)
    calls = _record_kernels(monkeypatch)
    q, k, v, table, rows, p, e = _batch([2000, 3, 0, 9, 40], [40, 2, 300, 15, 70], 9, 3, 64, torch.float32)
    want = torch_ref.extend_attention(q, k, v, table, rows, p, e, 0.125)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    packed, native = ([40, 300, 70], [2, 15]) if amx else ([300, 70], [40, 2, 15])
    assert sorted(calls) == [("extend_attention", native), ("f32_extend_attention", packed)]
    assert (got - want).abs().max().item() < 2e-5


@pytest.mark.parametrize("pairs", [True, False], ids=["pair-products", "widened"])
def test_bfloat16_without_the_tile_unit_goes_to_a_packed_fma_kernel(monkeypatch, pairs):
    """Without AMX: the AVX512-BF16 pair-product kernel from 32 new tokens where the CPU has it, else the widened
    FMA kernel from 64 (forced off here, so the widened path stays covered on such a CPU)."""
    if pairs and not cpu_packed.dp_extend_available(64):
        pytest.skip("no AVX512-BF16 on this CPU (or this build): the pair-product kernel cannot run here")
    monkeypatch.setattr(cpu_packed, "amx_extend_available", lambda head_dim: False)
    if not pairs:
        monkeypatch.setattr(cpu_packed, "dp_extend_available", lambda head_dim: False)
    calls = _record_kernels(monkeypatch)
    q, k, v, table, rows, p, e = _batch([2000, 3, 0, 7], [40, 2, 300, 31], 9, 3, 64, torch.bfloat16)
    want = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, p, e, 0.125)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    expected = ([("dp_extend_attention", [40, 300]), ("extend_attention", [2, 31])] if pairs
                else [("bf16_extend_attention", [300]), ("extend_attention", [40, 2, 31])])
    assert sorted(calls) == expected
    assert got.dtype == torch.bfloat16 and (got.double() - want).abs().max().item() < 3e-2


def test_without_a_packed_kernel_matrix_sized_work_goes_to_the_flash_pair(monkeypatch):
    """A head dim the packed kernels do not take (or no native build of them): new tokens x keys decides."""
    monkeypatch.setattr(cpu_packed, "f32_extend_available", lambda head_dim: False)
    calls = _record_kernels(monkeypatch)
    q, k, v, table, rows, p, e = _batch([2000, 3, 0], [40, 2, 300], 9, 3, 64, torch.float32)
    cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    assert sorted(calls) == [("extend_attention", [2]), ("flash", [40, 300])]


def test_cpu_backend_extends_through_it():
    assert dispatch.get_attention_ops("cpu", "cpu").extend_attention is cpu_extend.extend_attention


def test_a_shared_prefix_takes_extends_of_up_to_shared_max_extend_new_tokens(monkeypatch):
    """With a step's shared prefix, every request of at most SHARED_MAX_EXTEND new tokens goes to the native kernel
    with it (the prefix attended once); a step with a longer one is routed as without it."""
    from radixlm.kernels.cpu_shared_prefix import SharedPrefix

    shared_calls = []
    real = cpu_native.extend_attention
    monkeypatch.setattr(cpu_native, "extend_attention", lambda *a, shared=None, **k: shared_calls.append(
        shared is not None) or real(*a, shared=shared, **k))
    q, k, v, table, rows, p, e = _batch([400, 400, 400], [20, 2, 90], 9, 3, 64, torch.bfloat16)
    table[rows, :400] = table[rows[0], :400]                       # the same 400 cached keys in every row
    shared = SharedPrefix.find_for_extend(table, rows, p, e)
    assert shared is not None and shared.length == 400
    want = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, p, e, 0.125)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125, shared=shared)
    assert shared_calls == [True] and (got.double() - want).abs().max().item() < 3e-2
    monkeypatch.setattr(cpu_extend, "SHARED_MAX_EXTEND", 89)
    shared_calls.clear()
    cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125, shared=shared)
    assert True not in shared_calls
