"""Layers the Gemma and Phi-3 families share: Gemma's (1 + weight) RMSNorm, the gelu-tanh gated MLP activation,
soft-capping, and the packing of a model's linear weights for the CPU GEMM (packed_linear.py).

Notation as in llama.py: T tokens, H hidden, I intermediate.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .fp8_linear import Fp8Weight
from .packed_linear import add_amx_pack, add_rows_pack, amx_pack_available, pack, packing_available, rows_pack_available


def param(*shape, dtype, device) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Gemma: normalise over the last dim and multiply by (1 + weight), both in float32, then cast to x.dtype."""
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * (1.0 + weight.float())).to(x.dtype)


def gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """GeGLU: gate_up [T, 2I] -> gelu_tanh(gate) * up [T, I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def soft_cap(x: torch.Tensor, cap) -> torch.Tensor:
    """cap * tanh(x / cap); x unchanged when cap is None."""
    return x if not cap else torch.tanh(x / cap) * cap


def pack_linears(swaps, dtype, device, rows_pack: bool, amx_pack: bool) -> bool:
    """Replace each (module, name) weight by its packed copy for the CPU GEMM (and MKL's / the AMX linear's copies
    where asked and available).  False, changing nothing, where packing is unavailable.  FP8 weights (fp8_model.py)
    stay as they are."""
    if not packing_available(dtype, device):
        return False
    rows_pack = rows_pack and rows_pack_available(dtype, device)
    amx_pack = amx_pack and amx_pack_available(dtype, device)
    for module, name in swaps:
        dense = getattr(module, name)
        if isinstance(dense, Fp8Weight):
            continue
        packed = pack(dense)
        if rows_pack:
            add_rows_pack(packed, dense)
        if amx_pack:
            add_amx_pack(packed, dense)
        delattr(module, name)  # a tied lm_head leaves embed_tokens registered and dense
        setattr(module, name, packed)
    return True
