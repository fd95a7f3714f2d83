"""Hy3 (HF HYV3ForCausalLM, tencent/Hy3-preview): Llama's layers with per-head q/k norms (ModelConfig.qk_norm) and
DeepSeek-V3-style experts (moe_config.py) in the sparse layers of mlp_layer_types, the dense SwiGLU MLP elsewhere.

Its experts' correction bias sits beside the router (mlp.e_score_correction_bias, as MiniMax-M2's).  transformers 5
renames three of the released checkpoint's names in its modules and saves them back (mlp.router.gate.weight,
mlp.expert_bias, mlp.shared_mlp.*); both spellings are read.  Layers past num_hidden_layers (the released model's
multi-token-prediction layer 80) are skipped, as HF skips them.  No tensor parallelism (untested with its names) or
FP8 checkpoints.
"""

from typing import Iterable, Tuple

import torch

from .moe import SparseMoeBlock
from .moe_model import MoEForCausalLM, _beyond_last_layer

# the released checkpoint's names -> transformers 5's module names (HF's conversion_mapping "hy_v3")
_RENAMES = ((".mlp.router.gate.weight", ".mlp.gate.weight"), (".mlp.expert_bias", ".mlp.e_score_correction_bias"),
            (".mlp.shared_mlp.", ".mlp.shared_experts."))


class HYV3ForCausalLM(MoEForCausalLM):
    """MoEForCausalLM's contract on one rank."""

    loads_fp8_checkpoints = False

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.", bias_name="e_score_correction_bias")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream under transformers 5's names, without layers past num_hidden_layers."""
        for name, tensor in named_tensors:
            if not _beyond_last_layer(name, self.config.num_layers):
                for old, new in _RENAMES:
                    name = name.replace(old, new)
                yield name, tensor
