"""The fused MoE Triton kernel against the token-by-token torch reference (radixlm_kernels/torch_ref.fused_moe).

Without CUDA the kernel runs under the Triton interpreter (TRITON_INTERPRET=1, set before triton is first
imported); the `gpu`-marked variant runs the same checks compiled on CUDA.  Routing is random with skewed
expert popularity (some experts get no token, some more than a block), and expert parallelism holds a slice
of the experts: rows of the others must contribute exactly nothing.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first import of the kernels

pytest.importorskip("triton")

from radixlm.kernels import dispatch, torch_ref  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
INTERPRETED = dispatch.triton_interpreter_enabled() and not HAS_CUDA
DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(not INTERPRETED, reason="needs TRITON_INTERPRET=1 without CUDA")),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA or INTERPRETED,
                                                                    reason="needs CUDA without TRITON_INTERPRET")]),
]


def _case(tokens, experts, top_k, hidden, inter, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g)                              # [T, H]
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g) / hidden ** 0.5   # [E, 2I, H]
    w2 = torch.randn(experts, hidden, inter, generator=g) / inter ** 0.5      # [E, H, I]
    popularity = torch.linspace(3.0, 0.0, experts) ** 2                       # skewed: the last experts are rare
    logits = torch.randn(tokens, experts, generator=g) + popularity           # [T, E]
    weights, ids = torch.softmax(logits, -1).topk(top_k, -1)                  # [T, k] each
    to = dict(device=device)
    return (x.to(dtype=dtype, **to), w13.to(dtype=dtype, **to), w2.to(dtype=dtype, **to),
            weights.to(**to), ids.to(**to))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens,experts,top_k,hidden,inter", [(1, 4, 2, 32, 16), (37, 8, 2, 48, 40),
                                                               (20, 6, 3, 64, 32)])
def test_fused_moe_matches_the_reference(device, tokens, experts, top_k, hidden, inter):
    from radixlm.kernels import triton_moe

    x, w13, w2, weights, ids = _case(tokens, experts, top_k, hidden, inter, torch.float32, device)
    want = torch_ref.fused_moe(x, w13, w2, weights, ids)                      # [T, H]
    got = triton_moe.fused_moe(x, w13, w2, weights, ids)
    assert got.shape == want.shape and got.dtype == x.dtype
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_expert_parallel_slices_sum_to_the_whole(device):
    """Two holders of half the experts each (expert_offset 0 and E/2): their outputs sum to the full layer."""
    from radixlm.kernels import triton_moe

    x, w13, w2, weights, ids = _case(29, 8, 2, 32, 24, torch.float32, device, seed=1)
    full = torch_ref.fused_moe(x, w13, w2, weights, ids)                      # [T, H]
    halves = [triton_moe.fused_moe(x, w13[s:s + 4].contiguous(), w2[s:s + 4].contiguous(), weights, ids,
                                   expert_offset=s) for s in (0, 4)]
    for s, half in zip((0, 4), halves):
        torch.testing.assert_close(half, torch_ref.fused_moe(x, w13[s:s + 4], w2[s:s + 4], weights, ids, s),
                                   atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(halves[0] + halves[1], full, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_close_to_float32_reference(device):
    from radixlm.kernels import triton_moe

    x, w13, w2, weights, ids = _case(24, 8, 2, 64, 32, torch.bfloat16, device, seed=2)
    want = torch_ref.fused_moe(x.float(), w13.float(), w2.float(), weights, ids)   # same bf16-rounded inputs
    got = triton_moe.fused_moe(x, w13, w2, weights, ids).float()
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)


def test_align_groups_rows_by_expert_in_padded_blocks():
    from radixlm.kernels.triton_moe import align_by_expert

    ids = torch.tensor([[3, 0], [0, 5], [3, 0], [1, 0]])                     # 8 rows; expert 5 not held (E=4)
    rows, block_expert, total = align_by_expert(ids, 4, block_m=4)
    n = ids.numel()
    assert int(total) == 12                                                   # experts 0 (4 rows), 1 (1), 3 (2)
    blocks = rows[:int(total)].view(-1, 4).tolist()
    assert blocks == [[1, 2, 5, 7], [6, n, n, n], [0, 4, n, n]]               # stable order within an expert
    assert block_expert[:3].tolist() == [0, 1, 3]
    assert (rows[int(total):] == n).all()                                    # the worst-case tail is padding
    assert 3 not in rows.tolist()                                             # expert 5's row is dropped


def _clamped_swiglu(gate_up, limit=0.5, alpha=1.702):
    """gpt-oss's gated activation on [..., 2I] (gate columns, then up): a clamp that binds at this test's scale."""
    half = gate_up.shape[-1] // 2
    gate, up = gate_up[..., :half].clamp(max=limit), gate_up[..., half:].clamp(-limit, limit)
    return (up + 1) * gate * torch.sigmoid(alpha * gate)


@pytest.mark.parametrize("device", DEVICES)
def test_biases_and_another_activation(device):
    """gpt-oss's experts: biases on both GEMMs (the second's added before the routing weight) and its own gated
    activation, against the reference; the biases and the activation each change the result."""
    from radixlm.kernels import triton_moe

    x, w13, w2, weights, ids = _case(21, 8, 2, 32, 24, torch.float32, device, seed=3)
    g = torch.Generator().manual_seed(9)
    b13 = torch.randn(8, 48, generator=g).to(device)                             # [E, 2I]
    b2 = torch.randn(8, 32, generator=g).to(device)                              # [E, H]
    want = torch_ref.fused_moe(x, w13, w2, weights, ids, b13=b13, b2=b2, act=_clamped_swiglu)   # [T, H]
    got = triton_moe.fused_moe(x, w13, w2, weights, ids, b13=b13, b2=b2, act=_clamped_swiglu)
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    plain = torch_ref.fused_moe(x, w13, w2, weights, ids, act=_clamped_swiglu)
    silu = torch_ref.fused_moe(x, w13, w2, weights, ids, b13=b13, b2=b2)
    assert (want - plain).abs().max() > 1e-2 and (want - silu).abs().max() > 1e-2
