"""Gemma 1 (HF GemmaForCausalLM): Gemma 2's model (gemma2.py) with the Llama layer's two norms.

What it keeps from Gemma 2: embeddings scaled by sqrt(H) in the model dtype, (1 + weight) RMSNorms in float32, the
gelu-tanh gated MLP, the tied lm head and head_dim from the config.  What it lacks: the post-attention and
post-feed-forward norms of the sublayer outputs (its post_attention_layernorm is the MLP's pre-norm, as in Llama),
soft-caps, sliding windows and query_pre_attn_scalar (scores scale by head_dim ** -0.5); family_config.py leaves
those ModelConfig fields unset.

VaultGemma (HF VaultGemmaForCausalLM) is Gemma 2 with Gemma 1's pre-norm layer: Gemma 2's windows, soft-caps and
query_pre_attn_scalar (family_config.py reads them as Gemma 2's), its MLP pre-norm named pre_feedforward_layernorm.
"""

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma2 import Gemma2ForCausalLM, GemmaAttention, GemmaMLP
from .layer_ops import Rotary
from .layers import gemma_rms_norm, param


class GemmaPreNormLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)): Gemma 1's pre-norm residual block."""

    NORMS = ("input_layernorm", "post_attention_layernorm")   # before the attention, before the MLP

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        for name in self.NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = GemmaAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = GemmaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, local_rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        attn_norm, mlp_norm = (getattr(self, name) for name in self.NORMS)
        x = x + self.self_attn(gemma_rms_norm(x, attn_norm, self.eps), rotary, local_rotary, fb)  # [T, H]
        return x + self.mlp(gemma_rms_norm(x, mlp_norm, self.eps))  # [T, H]


class GemmaForCausalLM(Gemma2ForCausalLM):
    """Gemma 2's contract (no tensor parallelism, no native one-call decode), with Gemma 1's layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return GemmaPreNormLayer(self.config, layer_id, attn_backend, dtype, device)


class VaultGemmaPreNormLayer(GemmaPreNormLayer):
    NORMS = ("input_layernorm", "pre_feedforward_layernorm")


class VaultGemmaForCausalLM(Gemma2ForCausalLM):
    """Gemma 2's contract with VaultGemma's pre-norm layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return VaultGemmaPreNormLayer(self.config, layer_id, attn_backend, dtype, device)
