"""The Kimi delta rule (Kimi Linear's KDA layers), in float32, one request's tokens at a time: gated_delta_rule.py's
delta rule with a decay per key channel instead of per head.

Per head the state S [Dk, Dv] evolves token by token, g_t [Dk] the log-decay of each key channel:
    S <- diag(exp(g_t)) S;   d_t = beta_t (v_t - S^T k_t);   S <- S + k_t d_t^T;   o_t = S^T q_t
with q and k L2-normalised and q scaled by Dk ** -0.5.  `chunked` computes a chunk of C tokens at once: with G the
running sum of g in the chunk and E[i, j] = exp(G_i - G_j) per channel for j <= i (else 0; every exponent <= 0),
M[i, j] = sum_d k_i E[i, j] k_j and P[i, j] = sum_d q_i E[i, j] k_j, the updates D [C, Dv] solve
    (I + beta * M strictly below the diagonal) D = beta * V - beta * (exp(G) * K) S0,
and then O = (exp(G) * Q) S0 + P D (j <= i) and S_C = exp(G_C) * S0 + (exp(G_C - G) * K)^T D.
"""

import torch

from .gated_delta_rule import by_chunks

CHUNK = 16   # E is [Hv, C, C, Dk]


def chunked(q, k, v, g, beta, state: torch.Tensor) -> torch.Tensor:
    """One request's tokens.  q, k: [T, H, Dk] (normalised and scaled), v: [T, H, Dv], g: [T, H, Dk], beta: [T, H],
    all float32; state: [H, Dk, Dv] float32, updated in place.  -> outputs [T, H, Dv]."""
    return by_chunks(_chunk, CHUNK, (q, k, v, g, beta), state)


def _chunk(q, k, v, g, beta, state):
    """q, k, g: [H, C, Dk], v: [H, C, Dv], beta: [H, C]; state [H, Dk, Dv] updated.  -> [H, C, Dv]."""
    C = q.shape[1]
    G = g.cumsum(1)  # [H, C, Dk]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    E = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~causal[None, :, :, None], float("-inf")))  # [H,C,C,Dk]
    M = torch.einsum("hid,hijd,hjd->hij", k, E, k).tril(-1)  # [H, C, C]
    P = torch.einsum("hid,hijd,hjd->hij", q, E, k)  # [H, C, C]
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    rhs = beta[:, :, None] * (v - (k * G.exp()) @ state)  # [H, C, Dv]
    D = torch.linalg.solve_triangular(eye + beta[:, :, None] * M, rhs, upper=False, unitriangular=True)  # [H, C, Dv]
    out = (q * G.exp()) @ state + P @ D  # [H, C, Dv]
    last = G[:, -1:]  # [H, 1, Dk]
    state.mul_(last.exp().transpose(1, 2)).add_((torch.exp(last - G) * k).transpose(1, 2) @ D)
    return out


def recurrent_step(q, k, v, g, beta, states: torch.Tensor) -> torch.Tensor:
    """One token of each of B requests.  q, k, g: [B, H, Dk], v: [B, H, Dv], beta: [B, H] float32;
    states: [B, H, Dk, Dv] float32 (a copy: the caller writes it back).  -> outputs [B, H, Dv]."""
    states.mul_(g.exp()[:, :, :, None])
    d = beta[:, :, None] * (v - (states * k[:, :, :, None]).sum(-2))  # [B, H, Dv]
    states.add_(k[:, :, :, None] * d[:, :, None, :])
    return (states * q[:, :, :, None]).sum(-2)  # [B, H, Dv]
