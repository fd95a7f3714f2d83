"""Batched CPU extend attention (kernels/cpu_extend.py) against the torch reference."""

import pytest
import torch

from radixlm.kernels import cpu_extend, cpu_native, dispatch, torch_ref

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
    ([0, 20, 5], [cpu_extend.LONG_EXTEND + 3, 4, cpu_extend.LONG_EXTEND]),  # long chunks beside short ones
])
def test_matches_reference_float32(heads, prefix, ext):
    q, k, v, table, rows, p, e = _batch(prefix, ext, *heads, torch.float32)
    want = torch_ref.extend_attention(q, k, v, table, rows, p, e, heads[2] ** -0.5)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, heads[2] ** -0.5)
    assert got.shape == want.shape and (got - want).abs().max().item() < 2e-5


def test_matches_reference_bfloat16_into_out():
    q, k, v, table, rows, p, e = _batch([0, 33, 300], [17, 2, 9], 9, 3, 64, torch.bfloat16, seed=3)
    want = torch_ref.extend_attention(q, k, v, table, rows, p, e, 0.125)
    out = torch.full_like(q, float("nan"))
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125, out=out)
    assert got is out and out.dtype == torch.bfloat16
    assert (out.float() - want.float()).abs().max().item() < 3e-2


def test_cpu_backend_extends_through_it():
    assert dispatch.get_attention_ops("cpu", "cpu").extend_attention is cpu_extend.extend_attention
