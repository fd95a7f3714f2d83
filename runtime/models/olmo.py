"""OLMo (HF OlmoForCausalLM: OLMo 1, e.g. OLMo-7B-0724-hf): StarCoder2's pre-norm layer (starcoder2.py) with
LayerNorms that have no weight and no bias (HF's fixed eps 1e-5, computed in float32), the final norm too; the Llama
attention with q, k and v clamped to +-clip_qkv after their projection (config.clip_qkv) and attention_bias on all four
projections; Llama's SwiGLU MLP.  No tensor parallelism, native one-call decode or GGUF weights kept quantized.
Notation as in llama.py: T tokens, H hidden.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .llama import LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .starcoder2 import Starcoder2DecoderLayer


def plain_layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """HF OlmoLayerNorm: x [T, H] normalised over H in float32, cast back; no weight, no bias."""
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)  # [T, H]


class PlainLayerNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype, device):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return plain_layer_norm(x, self.eps)  # [T, H]


class OlmoDecoderLayer(Starcoder2DecoderLayer):
    norm_class = PlainLayerNorm
    mlp_class = LlamaMLP


class OlmoForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with OLMo's layers; the checkpoint has no norm weights (self.norm unused)."""

    LAYER_KIND = "parameterless-LayerNorm"

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return OlmoDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return plain_layer_norm(x, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        return {name: t for name, t in super()._weight_targets().items() if name != "model.norm.weight"}

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {}
