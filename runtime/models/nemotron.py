"""Nemotron (HF NemotronForCausalLM: Nemotron-4, Minitron): StarCoder2's pre-norm layer (starcoder2.py) with
LayerNorm1P norms (a bias, and the weight stored minus one: F.layer_norm by weight + 1), the final norm too; the Llama
attention with partial rotary (config.rotary_dim, rotate-half) and attention_bias on all four projections; Arcee's
non-gated relu^2 MLP (llama_like.ReluSquaredMLP) with biases where mlp_bias.  No tensor parallelism, native one-call
decode, GGUF weights kept quantized, FP8 checkpoints or --quantization fp8 (its MLP is not in fp8_model.py's layouts).
Jais 2 (Jais2ForCausalLM) is the same model with plain LayerNorms (a weight and a bias, no 1 added) and full rotary.
Notation as in llama.py: T tokens, H hidden.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .layernorm_model import LayerNorm, LayerNormForCausalLM
from .llama_like import ReluSquaredMLP
from .starcoder2 import Starcoder2DecoderLayer


def layer_norm_1p(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """HF NemotronLayerNorm1P: x [T, H] normalised over H, times (weight + 1) [H], plus bias [H]."""
    return F.layer_norm(x, (x.shape[-1],), weight + 1.0, bias, eps)  # [T, H]


class LayerNorm1P(LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm_1p(x, self.weight, self.bias, self.eps)  # [T, H]


class NemotronDecoderLayer(Starcoder2DecoderLayer):
    norm_class = LayerNorm1P
    mlp_class = ReluSquaredMLP


class NemotronForCausalLM(LayerNormForCausalLM):
    """LayerNormForCausalLM's contract with Nemotron's layers and final LayerNorm1P."""

    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False
    MLP_LINEARS = ("up_proj", "down_proj")
    layer_class = NemotronDecoderLayer

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return self.layer_class(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm_1p(x, self.norm, self.norm_bias, self.config.rms_norm_eps)  # [T, H]

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.targets(f"model.layers.{layer_id}.mlp.")


class Jais2DecoderLayer(Starcoder2DecoderLayer):
    mlp_class = ReluSquaredMLP


class Jais2ForCausalLM(NemotronForCausalLM):
    """NemotronForCausalLM's contract with LayerNorm layers and final norm."""

    layer_class = Jais2DecoderLayer
    final_norm = LayerNormForCausalLM.final_norm
