"""A linear layer kind whose weight stays in GGUF block formats (radixlm_kernels/cpu_quant.py multiplies it).

A QuantWeight stands where a model keeps a dense weight [N, K]: packed_linear.linear(x, w) hands it its input,
and embed(ids, w) reads rows of it (a tied embedding and lm head share one).  It holds parts stacked along N
(the fused q/k/v and gate/up weights come from separate GGUF tensors, possibly of different formats), each either
GGUF blocks (uint8 [n, row_bytes]) or, for a format without a kernel, a dense float copy.  A weight of quantized
parts only is one cpu_quant.layer_linear call (the native decode call's product: integer dot products for a few
rows, dense tiles for more); with a dense part, the activations are quantized once and serve every quantized part.
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from radixlm.kernels import cpu_quant


@dataclass
class QuantPart:
    fmt: str              # a cpu_quant.FORMATS name, or "dense" (data is then float [n, K])
    data: torch.Tensor    # uint8 [n, row_bytes] GGUF blocks, or float [n, K]


class QuantWeight:
    """Weight [N, K] as GGUF-format parts stacked along N; multiplied by the `isa` kernel family."""

    def __init__(self, parts: list, k: int, isa: str):
        self.parts, self.k, self.isa = parts, k, isa
        self.shape = (sum(p.data.shape[0] for p in parts), k)
        self._layer = None   # the cpu_quant.LayerLinear descriptor, built on the first product
        self._one_call = (isa in cpu_quant.NATIVE_ISAS and all(p.fmt != "dense" for p in parts)
                          and len(parts) <= cpu_quant.MAX_LAYER_PARTS)
        for p in parts:
            if p.fmt != "dense" and p.data.shape[1] != cpu_quant.row_bytes(p.fmt, k):
                raise ValueError(f"{p.fmt} part of {tuple(p.data.shape)} does not hold rows of {k}")

    @property
    def nbytes(self) -> int:
        return sum(p.data.numel() * p.data.element_size() for p in self.parts)

    def linear(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x [M, K] -> x @ W^T (+ bias) [M, N] in x's dtype (float32 inside)."""
        if self._one_call and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 2:
            if self._layer is None:
                self._layer = cpu_quant.layer_linear_weights([(p.fmt, p.data) for p in self.parts])
            return cpu_quant.layer_linear(x, self._layer, self.k, self.isa, bias=bias)
        xf = x.float().contiguous()                                           # [M, K]
        out = torch.empty((x.shape[0], self.shape[0]), dtype=torch.float32)   # [M, N]
        xq = None
        if self.isa != "torch" and any(p.fmt != "dense" for p in self.parts):
            xq = cpu_quant.quantize_activations(xf, self.isa)                 # [M, K/32 blocks]
        start = 0
        for p in self.parts:
            n = p.data.shape[0]
            if p.fmt == "dense":
                out[:, start:start + n] = F.linear(xf, p.data.float())
            else:
                cpu_quant.quant_linear(xf, p.data, p.fmt, self.isa, xq=xq, out=out[:, start:start + n])
            start += n
        if bias is not None:
            out += bias.float()
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` [T] of the dequantized weight -> float32 [T, K] (an embedding lookup)."""
        unique, inverse = torch.unique(ids, return_inverse=True)              # [U], [T]
        out = torch.empty((unique.numel(), self.k), dtype=torch.float32)      # [U, K]
        start = 0
        for p in self.parts:
            n = p.data.shape[0]
            hit = (unique >= start) & (unique < start + n)                    # [U]
            if hit.any():
                local = unique[hit] - start
                picked = p.data[local]                                        # [u, row_bytes] or [u, K]
                if p.fmt == "dense":
                    out[hit] = picked.float()
                elif self.isa in cpu_quant.NATIVE_ISAS:
                    out[hit] = cpu_quant.dequantize_native(picked, p.fmt, self.k, self.isa)
                else:
                    out[hit] = cpu_quant.dequantize(picked, p.fmt, self.k)
            start += n
        return out[inverse]                                                   # [T, K]


def embed(ids: torch.Tensor, weight, dtype: torch.dtype) -> torch.Tensor:
    """F.embedding for a dense weight or a QuantWeight: ids [T] -> [T, K] in dtype."""
    if isinstance(weight, QuantWeight):
        return weight.rows(ids).to(dtype)                                     # [T, K]
    return F.embedding(ids, weight)                                           # [T, K]
