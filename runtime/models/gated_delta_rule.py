"""The gated delta rule of linear-attention layers (Qwen3-Next, Qwen3.5), in float32, one request's tokens at a time.

Per value head the state S [Dk, Dv] evolves token by token:
    S <- exp(g_t) S;   d_t = beta_t (v_t - S^T k_t);   S <- S + k_t d_t^T;   o_t = S^T q_t
with q and k L2-normalised and q scaled by Dk ** -0.5.  `chunked` computes a chunk of C tokens at once: with
G the running sum of g in the chunk and W[i, j] = exp(G_i - G_j) for j <= i (else 0), the updates D [C, Dv] solve
    (I + A) D = beta * V - (beta exp(G)) * K S0,     A[i, j] = beta_i W[i, j] (k_i . k_j) for j < i,
and then O = exp(G) * Q S0 + (W * Q K^T) D and S_C = exp(G_C) S0 + (exp(G_C - G) * K)^T D.
"""

import torch

CHUNK = 64


def l2_normalized(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunked(q, k, v, g, beta, state: torch.Tensor) -> torch.Tensor:
    """One request's tokens.  q, k: [T, Hv, Dk] (normalised and scaled), v: [T, Hv, Dv], g, beta: [T, Hv], all
    float32; state: [Hv, Dk, Dv] float32, updated in place.  -> outputs [T, Hv, Dv]."""
    return by_chunks(_chunk, CHUNK, (q, k, v, g, beta), state)


def by_chunks(chunk_rule, size: int, inputs: tuple, state: torch.Tensor) -> torch.Tensor:
    """chunk_rule(*inputs' rows of each chunk of `size` tokens, heads first, state) in order (kda_rule.py's too):
    inputs [T, Hv, ...] each, the third the values [T, Hv, Dv]. -> [T, Hv, Dv]."""
    out = torch.empty_like(inputs[2])
    for start in range(0, inputs[0].shape[0], size):
        end = min(start + size, inputs[0].shape[0])
        out[start:end] = chunk_rule(*(t[start:end].transpose(0, 1) for t in inputs), state).transpose(0, 1)
    return out


def _chunk(q, k, v, g, beta, state):
    """q, k: [Hv, C, Dk], v: [Hv, C, Dv], g, beta: [Hv, C]; state [Hv, Dk, Dv] updated.  -> [Hv, C, Dv]."""
    C = q.shape[1]
    G = g.cumsum(-1)  # [Hv, C]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    W = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~causal, float("-inf")))  # [Hv, C, C]
    A = (beta[:, :, None] * W * (k @ k.transpose(1, 2))).tril(-1)  # [Hv, C, C]
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    rhs = beta[:, :, None] * v - (beta * G.exp())[:, :, None] * (k @ state)  # [Hv, C, Dv]
    D = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)  # [Hv, C, Dv]
    out = G.exp()[:, :, None] * (q @ state) + (W * (q @ k.transpose(1, 2))) @ D  # [Hv, C, Dv]
    last = G[:, -1:]  # [Hv, 1]
    state.mul_(last.exp()[:, :, None]).add_((torch.exp(last - G)[:, :, None] * k).transpose(1, 2) @ D)
    return out


def recurrent_step(q, k, v, g, beta, states: torch.Tensor) -> torch.Tensor:
    """One token of each of B requests.  q, k: [B, Hv, Dk], v: [B, Hv, Dv], g, beta: [B, Hv] float32;
    states: [B, Hv, Dk, Dv] float32 (a copy: the caller writes it back).  -> outputs [B, Hv, Dv]."""
    states.mul_(g.exp()[:, :, None, None])
    d = beta[:, :, None] * (v - (states * k[:, :, :, None]).sum(-2))  # [B, Hv, Dv]
    states.add_(k[:, :, :, None] * d[:, :, None, :])
    return (states * q[:, :, :, None]).sum(-2)  # [B, Hv, Dv]
