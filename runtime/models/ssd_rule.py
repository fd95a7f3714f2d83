"""The selective state-space rule of Mamba-2 mixers (state space duality), in float32, one request's tokens at a time.

Per head the state S [P, N] evolves token by token with a decay a_t = exp(dt_t * A) (A < 0):
    S <- a_t S + dt_t x_t B_t^T;   y_t = S C_t + D x_t
`chunked` computes a chunk of tokens at once: with G the running sum of dt * A in the chunk and W[i, j] =
exp(G_i - G_j) for j <= i (else 0),
    Y = (W * C B^T) (dt * X) + exp(G) * C S0^T,    S_end = exp(G_last) S0 + (exp(G_last - G) dt * X)^T B.
"""

import torch

CHUNK = 128


def chunked(x, dt, A, B, C, state: torch.Tensor) -> torch.Tensor:
    """One request's tokens.  x: [T, H, P], dt: [T, H] (after softplus), A: [H], B, C: [T, H, N], all float32;
    state: [H, P, N] float32, updated in place.  -> y [T, H, P] (without the D skip)."""
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], CHUNK):
        end = min(start + CHUNK, x.shape[0])
        out[start:end] = _chunk(*(t[start:end].transpose(0, 1) for t in (x, dt, B, C)), A, state).transpose(0, 1)
    return out


def _chunk(x, dt, B, C, A, state):
    """x: [H, L, P], dt: [H, L], B, C: [H, L, N]; state [H, P, N] updated.  -> [H, L, P]."""
    L = x.shape[1]
    G = (dt * A[:, None]).cumsum(-1)  # [H, L]
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    W = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~causal, float("-inf")))  # [H, L, L]
    xdt = x * dt[:, :, None]  # [H, L, P]
    y = (W * (C @ B.transpose(1, 2))) @ xdt + G.exp()[:, :, None] * (C @ state.transpose(1, 2))  # [H, L, P]
    last = G[:, -1:]  # [H, 1]
    state.mul_(last.exp()[:, :, None]).add_((torch.exp(last - G)[:, :, None] * xdt).transpose(1, 2) @ B)
    return y


def recurrent_step(x, dt, A, B, C, states: torch.Tensor) -> torch.Tensor:
    """One token of each of B requests.  x: [B, H, P], dt: [B, H], A: [H], B, C: [B, H, N] float32; states:
    [B, H, P, N] float32 (a copy: the caller writes it back).  -> y [B, H, P] (without the D skip)."""
    states.mul_(torch.exp(dt * A)[:, :, None, None]).add_((dt[:, :, None] * x)[:, :, :, None] * B[:, :, None, :])
    return (states * C[:, :, None, :]).sum(-1)
