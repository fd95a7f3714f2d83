"""The tile-unit (AMX) extend kernel (radixlm_kernels/csrc/cpu_amx_extend.c) against a float64 run of the torch reference.

Where the CPU or the build has no AMX-BF16 these tests skip, visibly; the rest of the suite then covers the
torch flash path that takes its place (tests/kernels/test_cpu_extend.py).

The bound is the kernel's own rounding, derived, not guessed: the scores are float32 sums of exact bfloat16
products, and each softmax weight is rounded once to bfloat16 (relative error u = 2^-8) before the weighted
sum of the values; the output is rounded once more.  For query row i with exact weights p_ij and output O_i,
rounding the weights moves the output by at most u / (1 - u) * A_i, where A_i = sum_j p_ij |v_j - O_i| (the
weights applied are divided by their own sum, so a common factor cancels); rounding the output adds u |O_i|.
The float32 sums add at most gamma_L = L 2^-24 of sum_j p_ij |v_j| over L keys.
"""

import pytest
import torch

from radixlm.kernels import cpu_extend, cpu_native, cpu_packed, torch_ref

pytestmark = pytest.mark.skipif(not (cpu_native.available() and cpu_packed.amx_extend_available(64)),
                                reason="no AMX-BF16 tile unit on this CPU (or no native build): the AMX extend "
                                       "kernel cannot run here")

U = 2.0 ** -8   # bfloat16's unit roundoff


def _batch(prefix, ext, num_q_heads, num_kv_heads, head_dim, seed=0, q_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    num_slots, width = 8192, max(p + e for p, e in zip(prefix, ext)) + 3
    k = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(torch.bfloat16)
    v = torch.randn(num_slots, num_kv_heads, head_dim, generator=g).to(torch.bfloat16)
    rows = torch.randperm(len(prefix) + 2, generator=g)[:len(prefix)]
    table = torch.randint(0, num_slots, (len(prefix) + 2, width), generator=g, dtype=torch.int32)
    q = (torch.randn(sum(ext), num_q_heads, head_dim, generator=g) * q_scale).to(torch.bfloat16)
    return q, k, v, table, rows, torch.tensor(prefix), torch.tensor(ext)


def _reference_and_bound(q, k, v, table, rows, prefix, ext, scale):
    """float64 outputs of the bfloat16 inputs, and each output's bound (module docstring)."""
    want = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, prefix, ext, scale)
    bound = torch.empty_like(want)
    G = q.shape[1] // k.shape[1]
    t = 0
    for row, p, e in zip(rows.tolist(), prefix.tolist(), ext.tolist()):
        keys = table[row, :p + e].long()
        kk = k[keys].double().repeat_interleave(G, 1).transpose(0, 1)     # [Hq, L, D]
        vv = v[keys].double().repeat_interleave(G, 1).transpose(0, 1)     # [Hq, L, D]
        qq = q[t:t + e].double().transpose(0, 1)                          # [Hq, E, D]
        s = qq @ kk.transpose(1, 2) * scale                               # [Hq, E, L]
        seen = torch.arange(p + e) <= (p + torch.arange(e)).unsqueeze(1)  # [E, L]
        w = torch.softmax(s.masked_fill(~seen, float("-inf")), -1)        # [Hq, E, L]
        o = want[t:t + e].transpose(0, 1)                                 # [Hq, E, D]
        dev = (vv.unsqueeze(1) - o.unsqueeze(2)).abs()                    # [Hq, E, L, D]
        a = (w.unsqueeze(-1) * dev).sum(2)                                # [Hq, E, D]
        mag = torch.einsum("hel,hld->hed", w, vv.abs())                   # [Hq, E, D]
        gamma = (p + e) * 2.0 ** -24
        bound[t:t + e] = (U / (1 - U) * a * (1 + U) + U * o.abs() + 2 * gamma * mag).transpose(0, 1)
        t += e
    return want, bound


@pytest.mark.parametrize("heads", [(9, 3, 64), (8, 2, 64), (4, 4, 128)])
@pytest.mark.parametrize("prefix,ext", [
    ([0], [16]), ([0], [1]), ([0, 7, 30], [5, 1, 12]),         # one tile of rows; fewer rows than a tile
    ([1500, 2], [33, 16]), ([0, 9], [17, 255]),                # a long cached prefix; partial tiles
    ([0, 20, 5], [259, 4, 256]), ([100, 0, 3], [0, 40, 8]),   # prefill chunks; a request with no new tokens
])
def test_within_its_rounding_of_float64(heads, prefix, ext):
    q, k, v, table, rows, p, e = _batch(prefix, ext, *heads)
    scale = heads[2] ** -0.5
    want, bound = _reference_and_bound(q, k, v, table, rows, p, e, scale)
    got = cpu_packed.amx_extend_attention(q, k, v, table, rows, p, e, scale)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"


def test_cpu_extend_sends_requests_of_eight_new_tokens_or_more_to_it(monkeypatch):
    calls = []
    for module, name in ((cpu_packed, "amx_extend_attention"), (cpu_native, "extend_attention")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, _real=real, _name=name, **kw: calls.append((_name, a[6].tolist())) or _real(*a, **kw))
    q, k, v, table, rows, p, e = _batch([2000, 3, 0, 50], [40, 2, 300, 7], 9, 3, 64)
    want, bound = _reference_and_bound(q, k, v, table, rows, p, e, 0.125)
    got = cpu_extend.extend_attention(q, k, v, table, rows, p, e, 0.125)
    assert sorted(calls) == [("amx_extend_attention", [40, 300]), ("extend_attention", [2, 7])]
    assert bool(((got.double() - want).abs() <= bound + 2 * U * want.abs()).all())
