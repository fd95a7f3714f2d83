"""The packed FMA extend kernel (radixlm_kernels/csrc/cpu_flash_f32.c) against a float64 run of the torch reference: on
float32 q and KV, and on bfloat16 ones (widened to float32 as it packs them, out rounded to bfloat16).

It runs wherever the native kernels build: 16-lane loops with AVX-512, 8-lane ones elsewhere (test_cpu_native
reruns this file with a build without AVX-512, so both are covered on an AVX-512 machine).

The bound is derived from the kernel's float32 arithmetic (u = 2^-24, gamma_n = n u / (1 - n u)), not guessed.
For query row i and key j, the weight exp(scale (s_ij - m_i)) is off by a relative eta_ij: the score's dot
product over D dims (scale gamma_D sum_d |q_d k_jd|, for s_ij and for the max), the subtraction and the scaling
(3 u |scale (s_ij - m_i)|), and the exp polynomial (2e-7, vec8.h).  Weights off by eta_j move the output by at
most sum_j p_ij eta_ij |v_j - O_i| (the weights are divided by their own sum).  The weighted sum of the values
and the sum of the weights over L keys add gamma_L (sum_j p_ij |v_j| + |O_i|); the final division 2 u |O_i|.
On bfloat16 inputs the same float32 arithmetic runs on their exact values, so the float64 reference takes the
same values, and the one rounding added is the output's to bfloat16: at most 2^-8 of the float32 result, itself
within the float32 bound of the reference.
"""

import pytest
import torch

from radixlm.kernels import cpu_native, cpu_packed, torch_ref

pytestmark = pytest.mark.skipif(not (cpu_native.available() and cpu_packed.f32_extend_available(64)),
                                reason="no native build of the float32 extend kernel")

U = 2.0 ** -24
U_BF16 = 2.0 ** -8
EXP_ERROR = 2e-7


def _gamma(n):
    return n * U / (1 - n * U)


def _batch(prefix, ext, num_q_heads, num_kv_heads, head_dim, seed=0, q_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    num_slots, width = 8192, max(p + e for p, e in zip(prefix, ext)) + 3
    k = torch.randn(num_slots, num_kv_heads, head_dim, generator=g)
    v = torch.randn(num_slots, num_kv_heads, head_dim, generator=g)
    rows = torch.randperm(len(prefix) + 2, generator=g)[:len(prefix)]
    table = torch.randint(0, num_slots, (len(prefix) + 2, width), generator=g, dtype=torch.int32)
    q = torch.randn(sum(ext), num_q_heads, head_dim, generator=g) * q_scale
    return q, k, v, table, rows, torch.tensor(prefix), torch.tensor(ext)


def _reference_and_bound(q, k, v, table, rows, prefix, ext, scale):
    want = torch_ref.extend_attention(q.double(), k.double(), v.double(), table, rows, prefix, ext, scale)
    bound = torch.empty_like(want)
    G, D = q.shape[1] // k.shape[1], q.shape[2]
    t = 0
    for row, p, e in zip(rows.tolist(), prefix.tolist(), ext.tolist()):
        L = p + e
        keys = table[row, :L].long()
        kk = k[keys].double().repeat_interleave(G, 1).transpose(0, 1)     # [Hq, L, D]
        vv = v[keys].double().repeat_interleave(G, 1).transpose(0, 1)     # [Hq, L, D]
        qq = q[t:t + e].double().transpose(0, 1)                          # [Hq, E, D]
        seen = torch.arange(L) <= (p + torch.arange(e)).unsqueeze(1)      # [E, L]
        x = (qq @ kk.transpose(1, 2) * scale).masked_fill(~seen, float("-inf"))   # [Hq, E, L]
        w = torch.softmax(x, -1)                                          # [Hq, E, L]
        dot_err = scale * _gamma(D) * (qq.abs() @ kk.abs().transpose(1, 2))         # [Hq, E, L]
        m_err = dot_err.masked_fill(~seen, 0).amax(-1, keepdim=True)
        shifted = (x - x.amax(-1, keepdim=True)).masked_fill(~seen, 0).abs()
        eta = dot_err + m_err + 3 * U * shifted + EXP_ERROR                   # [Hq, E, L]
        o = want[t:t + e].transpose(0, 1)                                     # [Hq, E, D]
        moved = ((w * eta).unsqueeze(-1) * (vv.unsqueeze(1) - o.unsqueeze(2)).abs()).sum(2)   # [Hq, E, D]
        mag = torch.einsum("hel,hld->hed", w, vv.abs())
        bound[t:t + e] = (moved * (1 + 1e-3) + _gamma(L + 1) * (mag + o.abs()) + 2 * U * o.abs()).transpose(0, 1)
        t += e
    return want, bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("heads", [(9, 3, 64), (8, 2, 64), (4, 4, 128)])
@pytest.mark.parametrize("prefix,ext", [
    ([0], [16]), ([0], [1]), ([0, 7, 30], [5, 1, 12]),
    ([1500, 2], [33, 16]), ([0, 9], [17, 255]),
    ([0, 20, 5], [259, 4, 256]), ([100, 0, 3], [0, 40, 8]),
])
def test_within_its_rounding_of_float64(heads, prefix, ext, dtype):
    q, k, v, table, rows, p, e = _batch(prefix, ext, *heads)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = heads[2] ** -0.5
    want, bound = _reference_and_bound(q.float(), k.float(), v.float(), table, rows, p, e, scale)
    kernel = cpu_packed.f32_extend_attention if dtype == torch.float32 else cpu_packed.bf16_extend_attention
    got = kernel(q, k, v, table, rows, p, e, scale)
    assert got.dtype == dtype and got.shape == q.shape
    if dtype == torch.bfloat16:
        bound = bound + U_BF16 * (want.abs() + bound)
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"max excess {(err - bound).max().item():.3g}"
