"""Phi-3.5-MoE and Phi-tiny-MoE (HF PhimoeForCausalLM): StarCoder2's pre-norm layer (LayerNorms with a bias,
layernorm_model.py; the Llama attention with attention_bias on all four projections) whose MLP is a SparseMoeBlock
in every layer, routed by HF's eval-mode sparsemixer (moe_router.py: two experts, router in the model dtype),
and LongRoPE with Phi-3.5-MoE's short/long mscale (rope.py).

Checkpoint names are Mixtral's (the hub's, and transformers 5's save_pretrained): per layer
block_sparse_moe.gate.weight [E, H], block_sparse_moe.experts.{e}.{w1 (gate), w3 (up), w2 (down)}.weight.
One rank: tensor and expert parallelism are refused (OwnLayersForCausalLM).  Notation as in llama.py.
"""

from torch import nn

from .layernorm_model import LayerNormForCausalLM
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .starcoder2 import Starcoder2DecoderLayer


def _sparse_block(config, dtype, device) -> SparseMoeBlock:
    return SparseMoeBlock(config.hidden_size, config.moe, dtype, device)


class PhimoeDecoderLayer(Starcoder2DecoderLayer):
    """x + attn(norm(x)), then x + experts(norm(x))."""

    mlp_class = staticmethod(_sparse_block)


class PhimoeForCausalLM(ExpertLayers, LayerNormForCausalLM):
    """MoEForCausalLM's contract (expert_load()) on one rank, with LayerNorm layers."""

    loads_fp8_checkpoints = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return PhimoeDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
        return swaps

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.block_sparse_moe.", ("w1", "w3", "w2"))
