"""The native fused elementwise ops (radixlm_kernels/csrc/cpu_fused_ops.c) against torch, float32 and bfloat16."""

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels import cpu_native
from radixlm.runtime.models import layer_ops

pytestmark = pytest.mark.skipif(not cpu_native.available(), reason="no C compiler for the native kernels")


def _randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _close(got, want, tol=2e-6):
    assert got.shape == want.shape
    err = ((got - want).abs() / (want.abs() + 1)).max().item()
    assert err < tol, err


@pytest.mark.parametrize("rows,n", [(1, 576), (37, 64), (300, 1000), (5, 13)])
def test_rms_norm_on_strided_rows(rows, n):
    wide = _randn(rows, n + 24, seed=1, scale=3.0)
    x = wide[:, 8:8 + n]  # rows strided: a view into a wider tensor
    w = _randn(n, seed=2)
    want = F.rms_norm(x, (n,), eps=1e-5) * w
    _close(cpu_native.rms_norm(x, w, 1e-5), want)


@pytest.mark.parametrize("rows,n", [(3, 576), (200, 576), (4, 21), (4, 29)])
def test_add_rms_norm_updates_residual(rows, n):
    x, residual, w = _randn(rows, n, seed=3), _randn(rows, n, seed=4), _randn(n, seed=5)
    want_residual = residual + x
    want = F.rms_norm(want_residual, (n,), eps=1e-6) * w
    got = cpu_native.add_rms_norm(x, residual, w, 1e-6)
    assert torch.equal(residual, want_residual)
    _close(got, want)


def _cos_sin(length, head_dim):
    angles = torch.outer(torch.arange(length).float(),
                         1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))  # [L, D/2]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)  # [L, D]


def _rope_reference(x, positions, cos_sin):
    cos, sin = cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@pytest.mark.parametrize("heads,head_dim", [(12, 64), (3, 20), (5, 128)])
def test_rope_in_place_on_a_slice_of_qkv(heads, head_dim):
    tokens, extra = 41, 2
    qkv = _randn(tokens, heads + extra, head_dim, seed=6)
    x = qkv[:, :heads]  # heads contiguous within a row, rows strided: the fused qkv layout
    positions = torch.randint(0, 500, (tokens,), generator=torch.Generator().manual_seed(7))
    cos_sin = _cos_sin(512, head_dim)
    want, untouched = _rope_reference(x.clone(), positions, cos_sin), qkv[:, heads:].clone()
    assert cpu_native.rope_(x, positions, cos_sin) is x
    _close(x, want)
    assert torch.equal(qkv[:, heads:], untouched)


@pytest.mark.parametrize("rows,n", [(2, 1536), (70, 1536), (3, 37), (3, 45)])   # tails of 5 and 13 lanes
def test_silu_mul_matches_torch_over_a_wide_range(rows, n):
    gate_up = _randn(rows, 2 * n, seed=8, scale=6.0)
    gate_up[0, :8] = torch.tensor([-200.0, -90.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 95.0])
    gate, up = gate_up.chunk(2, dim=-1)
    _close(cpu_native.silu_mul(gate_up), F.silu(gate) * up)


def _bf16_close(got, want):
    """bfloat16 results rounded where torch rounds: equal but for rare one-ulp ties from float32 sums."""
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    diff = (got.float() - want.float()).abs()
    assert (diff <= want.float().abs() * 2 ** -7 + 1e-30).all(), diff.max()
    assert (diff > 0).float().mean() < 0.01


def test_bfloat16_ops_round_like_torch():
    bf = torch.bfloat16
    x, residual, w = _randn(33, 576, seed=12).to(bf), _randn(33, 576, seed=13).to(bf), _randn(576, seed=14).to(bf)
    _bf16_close(cpu_native.rms_norm(x, w, 1e-5), F.rms_norm(x.float(), (576,), eps=1e-5).to(bf) * w)
    want_residual = residual + x
    got = cpu_native.add_rms_norm(x, residual, w, 1e-5)
    assert torch.equal(residual, want_residual)
    _bf16_close(got, F.rms_norm(want_residual.float(), (576,), eps=1e-5).to(bf) * w)
    gate_up = _randn(9, 2 * 1536, seed=15, scale=4.0).to(bf)
    gate, up = gate_up.chunk(2, dim=-1)
    _bf16_close(cpu_native.silu_mul(gate_up), F.silu(gate) * up)
    qkv = _randn(17, 5, 64, seed=16).to(bf)
    positions = torch.arange(17) * 7
    cos_sin = _cos_sin(128, 64).to(bf)
    want = _rope_reference(qkv[:, :4].clone(), positions, cos_sin)
    _bf16_close(cpu_native.rope_(qkv[:, :4], positions, cos_sin), want)


def test_layer_ops_use_torch_where_the_kernels_do_not_apply():
    per_head = _randn(3, 64, seed=10)  # a Qwen3 q/k norm weight: one row per head
    x3 = _randn(5, 3, 64, seed=11)
    _close(layer_ops.rms_norm(x3, per_head, 1e-5), F.rms_norm(x3, (64,), eps=1e-5) * per_head)


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        cpu_native.rms_norm(_randn(2, 8).double(), torch.ones(8), 1e-5)
    with pytest.raises(ValueError, match="weight"):
        cpu_native.rms_norm(_randn(2, 8), torch.ones(8, dtype=torch.bfloat16), 1e-5)
    with pytest.raises(ValueError, match="weight"):
        cpu_native.rms_norm(_randn(2, 8), torch.ones(9), 1e-5)
    with pytest.raises(ValueError, match="residual"):
        cpu_native.add_rms_norm(_randn(2, 8), _randn(2, 8).t().contiguous().t(), torch.ones(8), 1e-5)
    with pytest.raises(ValueError, match="contiguous heads"):
        cpu_native.rope_(_randn(4, 64, 3).transpose(1, 2), torch.zeros(4, dtype=torch.long), _randn(8, 64))


def test_rotary_refuses_positions_beyond_its_cache():
    with pytest.raises(ValueError, match="beyond the rotary cache"):
        layer_ops.Rotary(torch.tensor([0, 8]), _randn(8, 64))
