"""Mixtral, Qwen2-MoE and Qwen3-MoE: the Llama family's decoder with a SparseMoeBlock (moe.py) as the MLP of
its sparse layers (config.moe.sparse_layers) and the dense SwiGLU MLP elsewhere.  Attention, norms, rotary,
embedding, logits, KV cache and tensor parallelism are LlamaForCausalLM's, unchanged.

Checkpoint names mapped by _mlp_targets (HF's on-disk layout; transformers v5 also saves it):
  Qwen:    mlp.gate.weight [E, H], mlp.experts.{e}.{gate,up,down}_proj.weight,
           Qwen2-MoE: mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight [1, H]
  Mixtral: block_sparse_moe.gate.weight, block_sparse_moe.experts.{e}.{w1 (gate), w3 (up), w2 (down)}.weight
"""

from typing import Optional

import torch
from torch import nn

from .llama import LlamaDecoderLayer, LlamaForCausalLM
from .moe import SparseMoeBlock
from .packed_linear import pack


class MoEForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM's contract; expert_load() -> tokens routed to each expert of each sparse layer."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, moe = self.config, self.config.moe
        if layer_id not in moe.sparse_layers:
            return LlamaDecoderLayer(c, layer_id, attn_backend, dtype, device)
        return LlamaDecoderLayer(c, layer_id, attn_backend, dtype, device,
                                 mlp=SparseMoeBlock(c.hidden_size, moe, dtype, device))

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
        mixtral = self.config.architecture == "MixtralForCausalLM"
        p = f"model.layers.{layer_id}." + ("block_sparse_moe." if mixtral else "mlp.")
        gate, up, down = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
        inter = mlp.w2.shape[2]
        t = {p + "gate.weight": (mlp.gate, False)}
        for local in range(mlp.w13.shape[0]):
            e = mlp.expert_offset + local
            t[p + f"experts.{e}.{gate}.weight"] = (mlp.w13[local, :inter], False)
            t[p + f"experts.{e}.{up}.weight"] = (mlp.w13[local, inter:], False)
            t[p + f"experts.{e}.{down}.weight"] = (mlp.w2[local], False)
        if mlp.shared_gate_up is not None:
            shared = mlp.shared_down.shape[1]
            t[p + "shared_expert.gate_proj.weight"] = (mlp.shared_gate_up[:shared], False)
            t[p + "shared_expert.up_proj.weight"] = (mlp.shared_gate_up[shared:], False)
            t[p + "shared_expert.down_proj.weight"] = (mlp.shared_down, False)
            t[p + "shared_expert_gate.weight"] = (mlp.shared_expert_gate, False)
        return t
