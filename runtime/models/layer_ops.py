"""Elementwise ops of a decoder layer: fused native kernels for float32 and bfloat16 on CPU
(radixlm_kernels/cpu_native.py), torch everywhere else (CUDA, no C compiler, RADIXLM_DISABLE_NATIVE_KERNELS=1).

Both paths compute the same HF semantics; the native one makes one pass over memory per op
instead of several and far fewer torch dispatches per layer.
"""

import torch
import torch.nn.functional as F

from radixlm.kernels import cpu_native


def _native(x: torch.Tensor) -> bool:
    return x.dtype in cpu_native.FUSED_DTYPES and x.device.type == "cpu" and cpu_native.available()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise over the last dim in float32, cast back to x.dtype, then multiply by weight."""
    if _native(x) and weight.dtype == x.dtype and weight.dim() == 1:
        return cpu_native.rms_norm(x, weight, eps)
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype) * weight


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """residual += x in place (the pre-norm residual stream); returns rms_norm(residual)."""
    if (_native(x) and residual.is_contiguous() and residual.dtype == x.dtype and weight.dtype == x.dtype
            and weight.dim() == 1):
        return cpu_native.add_rms_norm(x, residual, weight, eps)
    residual.add_(x)
    return rms_norm(residual, weight, eps)


class Rotary:
    """The rotary inputs of one forward pass: each token's position and the model's [C, R] cache
    (cos in [:, :R/2], sin in [:, R/2:]); cos/sin rows are gathered once, for the torch path.  R below the
    head dim rotates the first R dims of each head (rotate-half among them) and passes the rest unchanged.
    query_scale: None, or each token's factor [T, 1, 1] on the rotated queries (rope.query_scale: Ministral 3)."""

    def __init__(self, positions: torch.Tensor, cos_sin: torch.Tensor, query_scale: torch.Tensor | None = None):
        if positions.device.type == "cpu" and positions.numel() and int(positions.max()) >= cos_sin.shape[0]:
            raise ValueError(f"position {int(positions.max())} is beyond the rotary cache ({cos_sin.shape[0]})")
        self.positions, self.cos_sin, self.query_scale = positions, cos_sin, query_scale
        self._cos_sin_rows = None

    def apply_(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, heads, D] -> rotated x; in place where the native kernel runs, else a new tensor."""
        rot = self.cos_sin.shape[1]
        if (_native(x) and self.cos_sin.dtype == x.dtype and x.stride(2) == 1 and x.stride(1) == x.shape[2]
                and rot == x.shape[2]):
            return cpu_native.rope_(x, self.positions, self.cos_sin)
        if self._cos_sin_rows is None:
            self._cos_sin_rows = self.cos_sin[self.positions].unsqueeze(1).chunk(2, dim=-1)  # [T, 1, R/2] x2
        cos, sin = self._cos_sin_rows
        x1, x2 = x[..., :rot].chunk(2, dim=-1)  # [T, heads, R/2] each
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]), dim=-1)  # [T, heads, D]


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU activation: gate_up [T, 2I] -> silu(gate) * up [T, I]."""
    if _native(gate_up) and gate_up.stride(-1) == 1:
        return cpu_native.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
