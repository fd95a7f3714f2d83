"""GLM-4 (HF Glm4ForCausalLM: GLM-4-0414): the Llama family's weights with two more norms per layer and interleaved
partial rotary embeddings; GLM-4 (2024, HF GlmForCausalLM: glm-4-9b-chat-hf) is the same without the two post norms,
so Llama's layer (native one-call decode refused: partial rotary).

Differences from Llama: post_self_attn_layernorm normalises the attention output and post_mlp_layernorm the MLP
output before each joins the residual stream (beside the usual input and post_attention pre-norms); the checkpoint
stores gate_up_proj fused ([gate; up] rows, as ours); q/k/v have biases, o_proj none; only the first
partial_rotary_factor of each head's dims rotate (config.rotary_dim), in interleaved pairs, run as rotate-half on q/k
rows reordered at load (interleaved_rope.py).  No tensor parallelism, no GGUF weights kept quantized and no native
one-call decode (its layer is Llama's).  Notation as in llama.py: T tokens, H hidden.
"""


import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .interleaved_rope import InterleavedRopeWeights
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .llama_like import OneRankLlama
from .own_layers import OwnLayersForCausalLM


class Glm4DecoderLayer(nn.Module):
    """x + norm(attn(norm(x))), then x + norm(mlp(norm(x)))."""

    NORMS = ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm")

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device, mlp: nn.Module = None):
        """mlp: any module mapping [T, H] -> [T, H] (default: the dense SwiGLU MLP; kolibri.py: the experts)."""
        super().__init__()
        self.eps = c.rms_norm_eps
        for name in self.NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = LlamaAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = mlp if mlp is not None else LlamaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        attn = self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = x + rms_norm(attn, self.post_self_attn_layernorm, self.eps)  # [T, H]
        mlp = self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps))  # [T, H]
        return x + rms_norm(mlp, self.post_mlp_layernorm, self.eps)  # [T, H]


class FusedGateUpCheckpoint:
    """Mixin of a LlamaForCausalLM subclass whose checkpoint stores the MLP's gate_up_proj fused ([gate; up] rows, as
    ours)."""

    def _weight_targets(self) -> dict:
        """HF name -> (destination tensor view, broadcast allowed): gate and up come fused."""
        t = {name: target for name, target in super()._weight_targets().items()
             if not any(f".mlp.{part}." in name for part in ("gate_proj", "up_proj"))}
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.mlp.gate_up_proj.weight"] = (layer.mlp.gate_up_proj, False)
        return t


class Glm4ForCausalLM(InterleavedRopeWeights, FusedGateUpCheckpoint, OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with GLM-4's four-norm layers."""

    LAYER_KIND = "four-norm"

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return Glm4DecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + ".weight": (getattr(layer, name), False) for name in layer.NORMS}


class GlmForCausalLM(InterleavedRopeWeights, FusedGateUpCheckpoint, OneRankLlama):
    """Llama's layer on q/k rows in rotate-half order, its gate_up_proj read fused."""
