"""Kolibri 1 (HF Kolibri1ForCausalLM): GLM-4's four-norm layer (glm4.py) around EXAONE 4's attention (per-head q/k
RMSNorms before rope; with a sliding window, its full-attention layers rotate neither q nor k: config.nope_layers)
and a SparseMoeBlock in every layer (moe_config.py: the correction bias on the logits, one un-gated shared MLP).

transformers 5 renames three of the released checkpoint's names in its modules and saves them back: moe.router.
expert_bias (the correction bias), post_attn_norm and post_ffn_norm; both spellings are read.  Kolibri 1.1: kolibri1_1.py.  No tensor
parallelism, FP8 or native one-call decode.  Notation as in llama.py: T tokens, H hidden.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from .glm4 import Glm4DecoderLayer
from .layer_ops import rms_norm
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .own_layers import OwnLayersForCausalLM

# the released checkpoint's names -> transformers 5's module names (HF's conversion_mapping "kolibri1")
_RENAMES = (("moe.router.expert_bias", "mlp.gate.e_score_correction_bias"),
            ("post_attn_norm", "post_self_attn_layernorm"), ("post_ffn_norm", "post_mlp_layernorm"))


class Kolibri1ForCausalLM(ExpertLayers, OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with four-norm layers whose MLP is a SparseMoeBlock; expert_load() as
    MoEForCausalLM's."""

    LAYER_KIND = "four-norm"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        return Glm4DecoderLayer(c, layer_id, attn_backend, dtype, device,
                                mlp=SparseMoeBlock(c.hidden_size, c.moe, dtype, device))

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + ".weight": (getattr(layer, name), False) for name in layer.NORMS}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
            if layer.mlp.shared_gate_up is not None:
                swaps += [(layer.mlp, "shared_gate_up"), (layer.mlp, "shared_down")]
        return swaps

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights with the released names read as transformers 5's."""
        super().load_weights(_renamed(named_tensors))


def _renamed(named_tensors):
    for name, tensor in named_tensors:
        for old, new in _RENAMES:
            name = name.replace(old, new)
        yield name, tensor
