"""The base of the LayerNorm families (StarCoder2: starcoder2.py, StableLM: stablelm.py): the Llama family's weights
(llama.py) in layers whose residual-stream norms are LayerNorms with a bias (HF nn.LayerNorm), the final norm too.

Each layer maps the residual stream x [T, H] to the next one (no separate residual tensor as in Llama's fused
add-and-norm).  No tensor parallelism, no native one-call decode (its layer is Llama's) and no GGUF weights kept
quantized (gguf_weights.py maps the Llama layer's norms only).  Notation as in llama.py: T tokens, H hidden.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .layers import param
from .own_layers import OwnLayersForCausalLM


class LayerNorm(nn.Module):
    """HF nn.LayerNorm over the last dim: weight and bias [H]."""

    def __init__(self, size: int, eps: float, dtype, device):
        super().__init__()
        self.eps = eps
        self.weight = param(size, dtype=dtype, device=device)  # [H]
        self.bias = param(size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)  # [T, H]

    def targets(self, name: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this norm called `name`."""
        return {name + ".weight": (self.weight, False), name + ".bias": (self.bias, False)}


class LayerNormForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with LayerNorm layers (make_layer: a module x [T, H] -> [T, H])."""

    LAYER_KIND = "LayerNorm"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        self.norm_bias = param(config.hidden_size, dtype=dtype, device=device)  # [H], beside self.norm's weight

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.norm, self.norm_bias, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        return dict(super()._weight_targets(), **{"model.norm.bias": (self.norm_bias, False)})

    def _norm_targets(self, prefix: str, layer) -> dict:
        targets = {}
        for name in ("input_layernorm", "post_attention_layernorm"):
            norm = getattr(layer, name)
            if norm is not None:   # StableLM's parallel residual has no post-attention norm
                targets.update(norm.targets(prefix + name))
        return targets
