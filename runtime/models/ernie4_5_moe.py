"""ERNIE 4.5 MoE and Hunyuan MoE.

ERNIE 4.5 MoE (HF Ernie4_5_MoeForCausalLM): dense ERNIE 4.5's layer (Llama's, interleaved rope run as rotate-half
on reordered q/k rows: interleaved_rope.py) with a SparseMoeBlock in its sparse layers (moe_config.py: softmax
scores, the correction bias for the choice, renormalised, un-gated shared experts).

Checkpoint names are Qwen's and DeepSeek's (mlp.gate.weight, mlp.experts.{e}.*_proj, mlp.shared_experts.*_proj)
but for the correction bias, mlp.moe_statics.e_score_correction_bias [1, E], read as [E]; the multi-token-prediction
weights of the released checkpoints (names with "mtp") are skipped, as HF skips them.  One rank, as dense ERNIE
4.5 (llama_like.py): tensor and expert parallelism are refused.

Hunyuan MoE (HF HunYuanMoEV1ForCausalLM): dense Hunyuan's layer (q/k norms after rope, llama_like.py) with a
SparseMoeBlock in every layer; its checkpoint's router mlp.gate.wg.weight, shared MLP mlp.shared_mlp.*_proj and
q/k norms query_layernorm/key_layernorm are read under our names.  One rank, as dense Hunyuan.
"""

from typing import Iterable, Tuple

import torch

from .interleaved_rope import InterleavedRopeWeights
from .llama import LlamaForCausalLM
from .llama_like import HunYuanDenseV1ForCausalLM, RenamedCheckpoint
from .moe import SparseMoeBlock
from .moe_model import MoEForCausalLM

_BIAS = "moe_statics.e_score_correction_bias"


class Ernie4_5_MoeForCausalLM(InterleavedRopeWeights, MoEForCausalLM):
    """MoEForCausalLM's contract on one rank."""

    loads_gguf_weights = False

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.", bias_name=_BIAS)

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """q/k rows in rotate-half order (InterleavedRopeWeights), the correction bias [1, E] as [E], no MTP weights."""
        flat = ((n, t.reshape(-1) if n.endswith(_BIAS) else t) for n, t in named_tensors if "mtp" not in n)
        return InterleavedRopeWeights.checkpoint_tensors(self, flat)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        LlamaForCausalLM.load_weights(self, self.checkpoint_tensors(named_tensors))


class HunYuanMoEV1ForCausalLM(RenamedCheckpoint, MoEForCausalLM):
    """MoEForCausalLM's contract on one rank."""

    loads_gguf_weights = False
    loads_fp8_checkpoints = False
    NAMES = {**HunYuanDenseV1ForCausalLM.NAMES, ".mlp.gate.wg.": ".mlp.gate.", ".mlp.shared_mlp.": ".mlp.shared_experts."}

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")
