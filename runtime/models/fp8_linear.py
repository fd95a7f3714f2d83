"""FP8 (e4m3) linear weights: a linear-layer kind for GPUs, with its torch reference.

A weight is an `Fp8Weight`: e4m3 values [N, K] and float32 scales, either one per output channel ([N];
quantize-at-load and per-tensor checkpoints, whose fused q/k/v or gate/up parts keep their own scale) or
one per [bn, bk] block ([ceil(N/bn), ceil(K/bk)]; block-scaled checkpoints, weight_scale_inv).  The dense
weight it stands for is `dequantize()`: value * scale of its channel or block.

`fp8_linear(x, w)` computes with the FP8 matrix product (`torch._scaled_mm`) where the device has one
(CUDA sm89+): the activations are quantized per token (row) to e4m3 with scale amax/448, then
x_q @ w_q^T * s_x * s_w, accumulated in float32.  Elsewhere (CPU, older GPUs, block scales) it multiplies
by the dequantized weight (weight-only FP8: the memory saving without the fast product); one log line
says so when the model is quantized.
Error per element: e4m3 has 3 mantissa bits, so rounding to nearest is within 2^-4 of the value in its
normal range (|v| >= 2^-6 scale) and within 2^-10 scale (half the subnormal spacing 2^-9) below it.
"""

import logging
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
MODES = ("scaled_mm", "dequant")


def scaled_mm_available(device) -> bool:
    """Whether torch._scaled_mm runs e4m3 products on this device: CUDA compute capability 8.9 or newer."""
    device = torch.device(device)
    if device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def quantize_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 [M, K], float32 scale [M, 1]) with x ~= q * scale, scale = amax(row) / 448."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()  # [M, 1]
    scale = amax.clamp(min=1e-12) / E4M3_MAX  # [M, 1]
    q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).contiguous()  # [M, K] row-major for _scaled_mm
    return q, scale


class Fp8Weight(nn.Module):
    """weight [N, K] e4m3 and scale: [N] float32 (per output channel) or [ceil(N/bn), ceil(K/bk)] (per block).

    mode: "scaled_mm" (activations quantized per token, torch._scaled_mm) or "dequant" (F.linear with the
    dequantized weight); block-scaled weights are always "dequant"."""

    def __init__(self, n: int, k: int, block: Optional[Tuple[int, int]] = None, mode: str = "dequant",
                 device="cpu"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"fp8 linear mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.n, self.k, self.block = n, k, tuple(block) if block else None
        self.mode = "dequant" if self.block else mode
        scale_shape = (-(-n // block[0]), -(-k // block[1])) if block else (n,)
        self.register_buffer("weight", torch.zeros((n, k), dtype=E4M3, device=device))  # [N, K]
        self.register_buffer("scale", torch.ones(scale_shape, dtype=torch.float32, device=device))  # [N] or blocks

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    @classmethod
    def from_dense(cls, dense: torch.Tensor, mode: str = "dequant") -> "Fp8Weight":
        """Per-output-channel quantization of a dense [N, K] weight (scale = the row's amax / 448)."""
        n, k = dense.shape
        w = cls(n, k, mode=mode, device=dense.device)
        q, scale = quantize_rows(dense)  # [N, K], [N, 1]
        w.weight.copy_(q)
        w.scale.copy_(scale.view(n))
        return w

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        """The dense weight [N, K] this stands for: value * its channel's or block's scale."""
        if self.block is None:
            return (self.weight.float() * self.scale[:, None]).to(dtype)  # [N, K]
        bn, bk = self.block
        scale = self.scale.repeat_interleave(bn, 0)[:self.n].repeat_interleave(bk, 1)[:, :self.k]  # [N, K]
        return (self.weight.float() * scale).to(dtype)  # [N, K]

    def extra_repr(self) -> str:
        return f"n={self.n}, k={self.k}, block={self.block}, mode={self.mode}"


def fp8_linear(x: torch.Tensor, w: Fp8Weight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] @ dequantize(w)^T (+ bias) -> [M, N] in x's dtype; see the module docstring for the modes."""
    if w.mode == "dequant" or x.shape[0] == 0:
        return F.linear(x, w.dequantize(x.dtype), bias)
    x_q, x_scale = quantize_rows(x)  # [M, K] e4m3, [M, 1]
    out = torch._scaled_mm(x_q, w.weight.t(), scale_a=x_scale, scale_b=w.scale.view(1, -1),
                           out_dtype=x.dtype)  # [M, N]
    return out if bias is None else out + bias


def choose_mode(device, n: int, k: int, dtype=torch.bfloat16) -> str:
    """scaled_mm where the device has it and the layer suits it (both dims multiples of 16, bfloat16 output:
    the row-wise scaled product's only output type), else dequant."""
    fits = n % 16 == 0 and k % 16 == 0 and dtype == torch.bfloat16
    return "scaled_mm" if fits and scaled_mm_available(device) else "dequant"
