"""Cohere 2 MoE (HF Cohere2MoeForCausalLM): Cohere 2's parallel layers (cohere.py: interleaved rope, the sliding
layers rotating, logits times logit_scale) whose MLP is a SparseMoeBlock (moe.py) on the sparse layers and Llama's
gated MLP on the dense ones (newtext_config.py).  Where the config averages the shared experts with the routed ones,
the block's sum is halved.  Its norms are RMSNorms where config.cohere2_moe.rms_norm, Cohere's LayerNorms otherwise.
Notation as in llama.py: T tokens, H hidden.
"""

import torch
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .cohere import CohereForCausalLM
from .layer_ops import Rotary, rms_norm
from .llama import LlamaMLP
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers, MoEForCausalLM
from .parallel_block import ParallelBlockLayer, layer_norm


class AveragedSharedMoeBlock(SparseMoeBlock):
    """(routed experts + shared experts) / 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0.5  # [T, H]


class RmsParallelBlockLayer(ParallelBlockLayer):
    """x + attn(rms(x)) + mlp(rms(x))."""

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        h = rms_norm(x, self.input_layernorm, self.eps)  # [T, H]
        return x + self.self_attn(h, rotary, fb) + self.mlp(h)  # [T, H]


class Cohere2MoeForCausalLM(ExpertLayers, CohereForCausalLM):
    """CohereForCausalLM's contract with experts on the sparse layers."""

    quantizes_to_fp8 = False

    def make_mlp_of(self, layer_id: int, dtype, device) -> nn.Module:
        c = self.config
        if layer_id not in c.moe.sparse_layers:
            return LlamaMLP(c, dtype, device)
        block = AveragedSharedMoeBlock if c.cohere2_moe.shared_average else SparseMoeBlock
        return block(c.hidden_size, c.moe, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer = RmsParallelBlockLayer if self.config.cohere2_moe.rms_norm else ParallelBlockLayer
        return layer(self.config, layer_id, attn_backend, dtype, device, self.make_mlp_of(layer_id, dtype, device),
                     False)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.config.cohere2_moe.rms_norm:
            return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]
        return layer_norm(x, self.norm, None, self.config.rms_norm_eps)  # [T, H]

    _linear_weights = MoEForCausalLM._linear_weights   # its dense MLPs, experts and shared experts

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")
