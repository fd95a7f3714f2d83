"""Mixtral, Qwen2-MoE, Qwen3-MoE, GLM-4.5 (Glm4Moe) and dots.llm1 (Dots1): the Llama family's decoder with a
SparseMoeBlock (moe.py) as the MLP of its sparse layers (config.moe.sparse_layers) and the dense SwiGLU MLP elsewhere
(GLM-4.5 and dots.llm1 need only ModelConfig's fields: moe_family_config.py).  Attention, norms, rotary,
embedding, logits, KV cache and tensor parallelism are LlamaForCausalLM's, unchanged.

Checkpoint names mapped by _mlp_targets (HF's on-disk layout; transformers v5 also saves it):
  Qwen:    mlp.gate.weight [E, H], mlp.experts.{e}.{gate,up,down}_proj.weight,
           Qwen2-MoE: mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight [1, H]
  GLM-4.5, dots.llm1 (DeepSeek's names): mlp.gate.weight, mlp.gate.e_score_correction_bias [E],
           mlp.experts.{e}.{gate,up,down}_proj.weight (the hub's and transformers 5's save_pretrained layout),
           mlp.shared_experts.{gate,up,down}_proj.weight
  Mixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.{e}.{w1 (gate), w3 (up), w2 (down)}.weight
  MiniMax-M2 (minimax_m2.py): Mixtral's names and block_sparse_moe.e_score_correction_bias [E]
  OLMoE: Qwen's; Granite 3 MoE, ERNIE 4.5 MoE, Hunyuan MoE: their own, read under these (granite_moe.py, ernie4_5_moe.py)
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from .llama import LlamaDecoderLayer, LlamaForCausalLM
from .moe import SparseMoeBlock
from .moe_config import NOAUX_TC_ARCHITECTURES
from .packed_linear import pack


class ExpertLayers:
    """What a model whose layers' `mlp` may be a SparseMoeBlock adds to its base class (listed after this one):
    sparse_blocks(), expert_load(), each expert packed on its own, no native decode, no --deterministic."""

    def sparse_blocks(self) -> list:
        """(layer id, SparseMoeBlock) of every sparse layer, in order."""
        return [(i, layer.mlp) for i, layer in enumerate(self.layers) if isinstance(layer.mlp, SparseMoeBlock)]

    def expert_load(self) -> dict:
        """{layer id: [tokens routed to expert e since start, for every e]} (one device-to-host copy)."""
        blocks = self.sparse_blocks()
        if not blocks:
            return {}
        counts = torch.stack([b.expert_tokens for _, b in blocks]).tolist()   # [L_sparse, E]
        return {i: row for (i, _), row in zip(blocks, counts)}

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return "mixture-of-experts layers (the native decode step runs dense layers only)"

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError("--deterministic does not support mixture-of-experts models yet")

    def pack_weights(self, rows_pack: bool = False, amx_pack: bool = False) -> bool:
        """As LlamaForCausalLM's, and each expert's two weights packed on their own (grouped_experts multiplies
        one expert at a time); the stacked dense expert weights are dropped."""
        if not super().pack_weights(rows_pack=rows_pack, amx_pack=amx_pack):
            return False
        for _, block in self.sparse_blocks():
            block.packed_experts = ([pack(w) for w in block.w13], [pack(w) for w in block.w2])
            block.w13 = block.w2 = None
        return True


class MoEForCausalLM(ExpertLayers, LlamaForCausalLM):
    """LlamaForCausalLM's contract; expert_load() -> tokens routed to each expert of each sparse layer."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, moe = self.config, self.config.moe
        if layer_id not in moe.sparse_layers:
            return LlamaDecoderLayer(c, layer_id, attn_backend, dtype, device)
        return LlamaDecoderLayer(c, layer_id, attn_backend, dtype, device,
                                 mlp=SparseMoeBlock(c.hidden_size, moe, dtype, device))

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
            if not isinstance(layer.mlp, SparseMoeBlock):
                swaps += [(layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
            elif layer.mlp.shared_gate_up is not None:
                swaps += [(layer.mlp, "shared_gate_up"), (layer.mlp, "shared_down")]
        return swaps

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        if self.config.architecture in ("MixtralForCausalLM", "MiniMaxM2ForCausalLM"):
            return mlp.checkpoint_targets(f"model.layers.{layer_id}.block_sparse_moe.", ("w1", "w3", "w2"),
                                          bias_name="e_score_correction_bias")
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """GLM-4.5 (and DeepSeek-V3) checkpoints carry their multi-token-prediction layers after the last decoder
        layer (model.layers.{num_layers}.. , num_nextn_predict_layers): HF skips them, and so do we."""
        if self.config.architecture not in NOAUX_TC_ARCHITECTURES:
            return named_tensors
        return ((name, t) for name, t in named_tensors if not _beyond_last_layer(name, self.config.num_layers))

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors) (gpt_oss.py's: its experts converted)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))


def _beyond_last_layer(name: str, num_layers: int) -> bool:
    parts = name.split(".")
    return name.startswith("model.layers.") and parts[2].isdigit() and int(parts[2]) >= num_layers
