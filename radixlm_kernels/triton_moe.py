"""Fused mixture-of-experts MLP in Triton: a grouped GEMM over tokens sorted by expert (as SGLang's and vLLM's
fused_moe), tested against torch_ref.fused_moe (on the CPU under TRITON_INTERPRET=1).

The T*k (token, choice) rows are sorted by expert and each expert's run padded to a multiple of BLOCK_M
(align_by_expert), so each program of a GEMM multiplies BLOCK_M rows of one expert by one BLOCK_N tile of that
expert's weight: an expert's weights are read once per tile column, however many tokens chose it.  Two GEMMs:
x [T, H] @ w13[e]^T -> [T*k, 2I], silu(gate) * up -> [T*k, I], then @ w2[e]^T scaled by the routing weight ->
[T*k, H], summed over k.  Nothing is copied to the host: the grid is sized for the worst case and programs past
the padded total return at once.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BLOCK_M = 16


def align_by_expert(topk_ids: torch.Tensor, num_experts: int, expert_offset: int = 0, block_m: int = BLOCK_M):
    """topk_ids [T, k] global expert ids -> (sorted_rows, block_expert, total), on the ids' device:

    sorted_rows [P] int32: flat (token * k + choice) rows grouped by local expert (id - expert_offset), each
    group padded with T*k to a multiple of block_m; P = T*k + E*(block_m - 1) rounded up to block_m, the worst
    case.  Rows of experts outside 0..E-1 (held by another rank) appear nowhere.
    block_expert [P / block_m] int32: the local expert of each block (blocks past the total repeat expert 0).
    total [1] int32: the padded rows in use.
    """
    n = topk_ids.numel()
    flat = topk_ids.reshape(-1).long() - expert_offset                            # [N]
    held = (flat >= 0) & (flat < num_experts)                                     # [N]
    key = torch.where(held, flat, torch.full_like(flat, num_experts))             # [N]: E = not held here
    # counted by index_add_, not bincount, whose CUDA version reads the max id on the host (no graph capture)
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=flat.device).index_add_(
        0, key, torch.ones_like(key))[:num_experts]                               # [E]
    padded = (counts + block_m - 1) // block_m * block_m                          # [E]
    ends = torch.cumsum(padded, 0)                                                # [E]
    starts = ends - padded                                                        # [E]
    order = torch.argsort(key, stable=True)                                       # [N]
    sorted_key = key[order]                                                       # [N]
    first_of_key = torch.cumsum(torch.cat((counts.new_zeros(1), counts)), 0)      # [E+1]
    rank = torch.arange(n, device=flat.device) - first_of_key[sorted_key]         # [N]
    size = -(-(n + num_experts * (block_m - 1)) // block_m) * block_m
    dest = torch.where(sorted_key < num_experts, starts[sorted_key.clamp(max=num_experts - 1)] + rank,
                       torch.full_like(rank, size))                               # [N]: size = dropped
    sorted_rows = torch.full((size + 1,), n, dtype=torch.int32, device=flat.device)   # [P+1]
    sorted_rows[dest] = order.to(torch.int32)
    block_starts = torch.arange(0, size, block_m, device=flat.device)             # [P/block_m]
    block_expert = torch.searchsorted(ends, block_starts, right=True).clamp(max=num_experts - 1)
    total = ends[-1:].to(torch.int32) if num_experts else torch.zeros(1, dtype=torch.int32, device=flat.device)
    return sorted_rows[:size], block_expert.to(torch.int32), total


@triton.jit
def _moe_gemm(a_ptr, b_ptr, c_ptr, w_ptr, bias_ptr, rows_ptr, block_expert_ptr, total_ptr,
              num_rows, N, K, stride_am, stride_be, stride_bn, stride_cm, stride_bias,
              A_ROW_DIV: tl.constexpr, MUL_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, DOT_FP32: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[row] = (A[row // A_ROW_DIV] @ B[e]^T (+ bias[e])) (* w[row]) for the BLOCK_M sorted rows of this program's
    block."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return
    rows = tl.load(rows_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))                       # [BM]
    valid = rows < num_rows                                                                   # [BM]
    e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)                                          # [BN]
    a_rows = (rows // A_ROW_DIV).to(tl.int64)                                                 # [BM]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)                                      # [BM, BN]
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)                                                   # [BK]
        a = tl.load(a_ptr + a_rows[:, None] * stride_am + offs_k[None, :],
                    mask=valid[:, None] & (offs_k[None, :] < K), other=0.0)                   # [BM, BK]
        b = tl.load(b_ptr + e * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)            # [BK, BN]
        if DOT_FP32:   # float32 models (ieee, not tf32), and the interpreter, which mishandles a bf16 tl.dot
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + e * stride_bias + offs_n, mask=offs_n < N, other=0.0)        # [BN]
        acc += bias.to(tl.float32)[None, :]
    if MUL_WEIGHT:
        w = tl.load(w_ptr + rows, mask=valid, other=0.0)                                      # [BM]
        acc = acc * w[:, None]
    c = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (offs_n[None, :] < N))


def _gemm(a, b, c, weights, aligned, a_row_div: int, block_m: int, bias=None):
    """c[rows] = (a[rows // a_row_div] @ b[e]^T (+ bias[e])) (* weights[rows]); a [*, K], b [E, N, K],
    c [num_rows, N], bias [E, N] or None."""
    sorted_rows, block_expert, total = aligned
    n, k = b.shape[1], b.shape[2]
    block_n, block_k = 32, 32
    grid = (block_expert.numel(), triton.cdiv(n, block_n))
    _moe_gemm[grid](a, b, c, weights, bias, sorted_rows, block_expert, total, c.shape[0], n, k,
                    a.stride(0), b.stride(0), b.stride(1), c.stride(0), 0 if bias is None else bias.stride(0),
                    A_ROW_DIV=a_row_div, MUL_WEIGHT=weights is not None, HAS_BIAS=bias is not None,
                    DOT_FP32=a.dtype == torch.float32 or not a.is_cuda,
                    BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)


def fused_moe(x, w13, w2, topk_weights, topk_ids, expert_offset: int = 0, block_m: int = BLOCK_M, b13=None, b2=None,
              act=None):
    """Same contract as torch_ref.fused_moe: x [T, H], w13 [E, 2I, H], w2 [E, H, I], topk_weights [T, k]
    float32, topk_ids [T, k] -> [T, H] in x.dtype; b13 [E, 2I] / b2 [E, H] the experts' biases or None; act the
    gated activation on float32 [N, 2I] -> [N, I] (None: silu(gate) * up).  Every tensor contiguous, on one CUDA
    device (or the CPU under TRITON_INTERPRET=1)."""
    t, k = topk_ids.shape
    num_experts, two_i, hidden = w13.shape
    aligned = align_by_expert(topk_ids, num_experts, expert_offset, block_m)
    gate_up = torch.empty(t * k, two_i, dtype=x.dtype, device=x.device)               # [T*k, 2I]
    _gemm(x.contiguous(), w13, gate_up, None, aligned, k, block_m, b13)
    if act is None:
        gated = (F.silu(gate_up[:, :two_i // 2].float()) * gate_up[:, two_i // 2:].float()).to(x.dtype)  # [T*k, I]
    else:
        gated = act(gate_up.float()).to(x.dtype)                                      # [T*k, I]
    out = torch.zeros(t * k, hidden, dtype=x.dtype, device=x.device)                   # [T*k, H]
    weights = topk_weights.reshape(-1).float().contiguous()                            # [T*k]
    _gemm(gated, w2, out, weights, aligned, 1, block_m, b2)
    return out.view(t, k, hidden).sum(1)                                               # [T, H]
