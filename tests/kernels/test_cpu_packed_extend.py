"""What the packed extend kernels (radixlm_kernels/csrc/extend_blocks.h: the AMX one for bfloat16, the FMA one for float32
and for bfloat16 widened to float32) must hold beyond their rounding bounds (test_cpu_amx_extend.py, test_cpu_flash_f32.py): the causal
mask exactly, results independent of the batch and the chunking, and the row layout the model passes."""

import pytest
import torch

from radixlm.kernels import cpu_native, cpu_packed

KERNELS = [
    pytest.param(torch.bfloat16, 2.0 ** -8, "amx_extend_attention", marks=pytest.mark.skipif(
        not (cpu_native.available() and cpu_packed.amx_extend_available(64)),
        reason="no AMX-BF16 tile unit on this CPU (or no native build)"), id="amx-bf16"),
    pytest.param(torch.float32, 2.0 ** -24, "f32_extend_attention", marks=pytest.mark.skipif(
        not (cpu_native.available() and cpu_packed.f32_extend_available(64)),
        reason="no native build of the float32 extend kernel"), id="fma-f32"),
    pytest.param(torch.bfloat16, 2.0 ** -8, "bf16_extend_attention", marks=pytest.mark.skipif(
        not (cpu_native.available() and cpu_packed.f32_extend_available(64)),
        reason="no native build of the FMA extend kernel"), id="fma-bf16"),
]


def _batch(prefix, ext, dtype, seed=0, q_scale=1.0, heads=(9, 3, 64)):
    num_q_heads, num_kv_heads, head_dim = heads
    g = torch.Generator().manual_seed(seed)
    num_slots, width = 8192, max(p + e for p, e in zip(prefix, ext)) + 3
    k = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(dtype)
    rows = torch.randperm(len(prefix) + 2, generator=g)[:len(prefix)]
    table = torch.randint(0, num_slots, (len(prefix) + 2, width), generator=g, dtype=torch.int32)
    q = (torch.randn(sum(ext), num_q_heads, head_dim, generator=g) * q_scale).to(dtype)
    return q, k, v, table, rows, torch.tensor(prefix), torch.tensor(ext)


@pytest.mark.parametrize("dtype,u,kernel", KERNELS)
def test_uniform_weights_give_the_mean_of_exactly_the_keys_each_token_sees(dtype, u, kernel):
    """q = 0: every weight is exp(0) = 1 exactly, so each output is the mean of the values its token sees; with
    small integer values that mean is exact in float32 up to the final division and rounding (at most 3 u of
    it).  A causal mask one key off moves a mean by |v - mean| / (n + 1), far above that."""
    prefix, ext = [0, 37, 300], [70, 45, 33]
    q, k, v, table, rows, p, e = _batch(prefix, ext, dtype, seed=4, q_scale=0.0)
    v = torch.randint(-50, 51, v.shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    got = getattr(cpu_packed, kernel)(q, k, v, table, rows, p, e, 0.125).double()
    t = 0
    for row, pre, n in zip(rows.tolist(), prefix, ext):
        vals = v[table[row, :pre + n].long()].double().repeat_interleave(3, 1)     # [L, Hq, D]
        for i in range(n):
            mean = vals[:pre + i + 1].mean(0)                                      # [Hq, D]
            assert bool(((got[t + i] - mean).abs() <= 3 * u * mean.abs()).all()), (row, i)
        t += n


@pytest.mark.parametrize("dtype,u,kernel", KERNELS)
def test_rows_do_not_depend_on_the_batch_or_the_chunking(dtype, u, kernel):
    """A request's output bits are the same alone or beside others, and in one chunk or two (the second reading
    the first's keys as a cached prefix), so a prefix cache hit gives the tokens a cold prefill gives."""
    attend = getattr(cpu_packed, kernel)
    q, k, v, table, rows, p, e = _batch([0, 0], [300, 77], dtype, seed=6)
    both = attend(q, k, v, table, rows, p, e, 0.125)
    alone = attend(q[:300], k, v, table, rows[:1], p[:1], e[:1], 0.125)
    assert torch.equal(both[:300], alone)
    first = attend(q[:123], k, v, table, rows[:1], p[:1], torch.tensor([123]), 0.125)
    second = attend(q[123:300], k, v, table, rows[:1], torch.tensor([123]), torch.tensor([177]), 0.125)
    assert torch.equal(torch.cat([first, second]), alone)


@pytest.mark.parametrize("dtype,u,kernel", KERNELS)
def test_strided_q_and_rows_given_by_starts(dtype, u, kernel):
    """q as the model passes it (a slice of the fused qkv rows); starts= writes only the given requests' rows."""
    attend = getattr(cpu_packed, kernel)
    q, k, v, table, rows, p, e = _batch([5, 0, 40], [20, 9, 31], dtype, seed=7)
    qkv = torch.cat([q, torch.zeros(q.shape[0], 6, 64, dtype=dtype)], 1)          # [T, 15, D]
    want = attend(q, k, v, table, rows, p, e, 0.125)
    out = torch.full_like(q, float("nan"))
    got = attend(qkv[:, :9], k, v, table, rows[[0, 2]], p[[0, 2]], e[[0, 2]], 0.125, out=out, starts=[0, 29])
    assert got is out and torch.equal(out[:20], want[:20]) and torch.equal(out[29:], want[29:])
    assert bool(out[20:29].isnan().all())
