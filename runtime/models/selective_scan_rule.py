"""The selective scan of Mamba-1 mixers, in float32, one request's tokens at a time.

Each of D channels keeps a state row h [N] that decays per state dim with its own rate A [D, N] (A < 0):
    h_t = exp(dt_t A) * h_{t-1} + dt_t x_t B_t;   y_t = h_t . C_t   (the D x_t skip and the gate are the mixer's)
The step is h -> a h + b with a = exp(dt A) and b = dt x B, and steps compose associatively:
(a1, b1) then (a2, b2) is (a2 a1, a2 b1 + b2).  `chunked` scans CHUNK tokens at a time in log2(CHUNK) such
doublings (Hillis-Steele), the chunk's first step carrying the state in; `recurrent_step` is the token-by-token form.
Notation: T tokens, D channels, N state dims, L a chunk's tokens.
"""

import torch

CHUNK = 64


def chunked(x, dt, A, B, C, state: torch.Tensor) -> torch.Tensor:
    """One request's tokens.  x, dt: [T, D] (dt after softplus), A: [D, N], B, C: [T, N], all float32; state: [D, N]
    float32, updated in place.  -> y [T, D] (without the D skip)."""
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], CHUNK):
        end = min(start + CHUNK, x.shape[0])
        out[start:end] = _chunk(x[start:end], dt[start:end], A, B[start:end], C[start:end], state)
    return out


def _chunk(x, dt, A, B, C, state):
    """x, dt: [L, D], B, C: [L, N]; state [D, N] updated.  -> [L, D]."""
    a = torch.exp(dt[:, :, None] * A)  # [L, D, N]
    b = (dt * x)[:, :, None] * B[:, None, :]  # [L, D, N]
    b[0] += a[0] * state
    step = 1
    while step < x.shape[0]:   # after it, b[t] is the state after token t
        b = torch.cat([b[:step], b[step:] + a[step:] * b[:-step]])  # [L, D, N]
        a = torch.cat([a[:step], a[step:] * a[:-step]])  # [L, D, N]
        step *= 2
    state.copy_(b[-1])
    return torch.einsum("ldn,ln->ld", b, C)  # [L, D]


def recurrent_step(x, dt, A, B, C, states: torch.Tensor) -> torch.Tensor:
    """One token of each of R requests.  x, dt: [R, D], A: [D, N], B, C: [R, N] float32; states: [R, D, N] float32
    (a copy: the caller writes it back).  -> y [R, D] (without the D skip)."""
    states.mul_(torch.exp(dt[:, :, None] * A)).add_((dt * x)[:, :, None] * B[:, None, :])
    return torch.einsum("rdn,rn->rd", states, C)  # [R, D]
