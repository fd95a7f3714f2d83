"""MiniMax-M3's language model (HF MiniMaxM3VLForCausalLM; fields: minimax_m3_config.py): pre-norm layers with
(1 + weight) RMSNorms, attention with per-head (1 + weight) q/k norms before a partial rope, then a dense MLP or a
sparse block of experts with a shared MLP, every MLP the clamped SwiGLU (gpt_oss.clamped_swiglu, gate rows then up).
The sparse-attention layers' indexers are not run (the context is capped where they keep every key:
minimax_m3_config.py); their weights are read and dropped.

Checkpoint names: transformers 5's (mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I] stacked, fused
gate_up_proj of the dense and shared MLPs, self_attn.indexer.*) and the released ones (block_sparse_moe.*,
experts.{e}.w1/w3/w2, gate_proj and up_proj apart, self_attn.index_*) are both read; multi-token-prediction weights
(mtp.*, under any prefix) are skipped, as HF skips them.  One rank, no FP8, no native one-call decode.
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim, I an MLP's width, E experts.
"""

import re
from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .gpt_oss import clamped_swiglu
from .laguna import GemmaPreNormLayer
from .layers import gemma_rms_norm, param
from .llama import LlamaAttention
from .moe import SparseMoeBlock, _use_triton, grouped_experts
from .moe_model import ExpertLayers
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear

_RELEASED = ((".block_sparse_moe.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"),
             (".block_sparse_moe.", ".mlp."))
_EXPERT_PARTS = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
_RELEASED_EXPERT = re.compile(r"^(.*\.mlp\.experts\.\d+\.)(w1|w2|w3)(\.weight)$")
_INDEXER = (".self_attn.indexer.", ".self_attn.index_")
_MTP = re.compile(r"(^|\.)mtp\.")   # HF's _keys_to_ignore_on_load_unexpected


class GemmaNormAttention(LlamaAttention):
    """Llama's attention with per-head (1 + weight) q/k RMSNorms."""

    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """qk [T, Hq+Hkv, D] -> [T, Hq+Hkv, D]."""
        return gemma_rms_norm(qk, self.qk_norm, self.eps)


class ClampedMLP(nn.Module):
    """down(clamped_swiglu(gate_up(x))): the dense layers' MLP.  x [T, H] -> [T, H]."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        m, inter = c.minimax_m3, c.minimax_m3.dense_intermediate_size
        self.limit, self.alpha = m.swiglu_limit, m.swiglu_alpha
        self.w_gate_up = param(2 * inter, c.hidden_size, dtype=dtype, device=device)  # [2I, H]
        self.w_down = param(c.hidden_size, inter, dtype=dtype, device=device)  # [H, I]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(clamped_swiglu(linear(x, self.w_gate_up), self.limit, self.alpha), self.w_down)  # [T, H]


class ClampedMoeBlock(SparseMoeBlock):
    """SparseMoeBlock whose experts and shared MLP run the clamped SwiGLU."""

    def __init__(self, hidden_size: int, moe, dtype, device):
        super().__init__(hidden_size, moe, dtype, device)
        limit, alpha = moe.swiglu_limit, moe.swiglu_alpha
        self.act = lambda gate_up: clamped_swiglu(gate_up, limit, alpha)

    def experts_out(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.packed_experts is None and _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        else:
            experts = self.packed_experts or (self.w13, self.w2)
            out = grouped_experts(x, *experts, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        if self.shared_gate_up is not None:
            out = out + linear(self.act(linear(x, self.shared_gate_up)), self.shared_down)  # [T, H]
        return out


class MiniMaxM3ForCausalLM(ExpertLayers, OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract; expert_load() as MoEForCausalLM's."""

    LAYER_KIND = "MiniMax-M3"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = (ClampedMoeBlock(c.hidden_size, c.moe, dtype, device) if layer_id in c.moe.sparse_layers
               else ClampedMLP(c, dtype, device))
        attn = GemmaNormAttention(c, layer_id, attn_backend, dtype, device)
        return GemmaPreNormLayer(c, attn, mlp, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            swaps += [(attn, "qkv_proj"), (attn, "o_proj")]
            if isinstance(mlp, ClampedMLP):
                swaps += [(mlp, "w_gate_up"), (mlp, "w_down")]
            elif mlp.shared_gate_up is not None:
                swaps += [(mlp, "shared_gate_up"), (mlp, "shared_down")]
        return swaps

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        p = f"model.layers.{layer_id}.mlp."
        if isinstance(mlp, SparseMoeBlock):
            return mlp.checkpoint_targets(p)
        inter = mlp.w_down.shape[1]
        return {p + "gate_proj.weight": (mlp.w_gate_up[:inter], False),
                p + "up_proj.weight": (mlp.w_gate_up[inter:], False), p + "down_proj.weight": (mlp.w_down, False)}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream under the per-expert, gate-and-up-apart names _weight_targets reads."""
        for name, tensor in named_tensors:
            if _MTP.search(name) or any(part in name for part in _INDEXER):
                continue
            for old, new in _RELEASED:
                name = name.replace(old, new)
            released = _RELEASED_EXPERT.match(name)
            if released:
                yield released.group(1) + _EXPERT_PARTS[released.group(2)] + released.group(3), tensor
            elif name.endswith(".mlp.experts.gate_up_proj"):   # [E, 2I, H]
                for e, w in enumerate(tensor):
                    yield from _gate_and_up(f"{name[:-len('gate_up_proj')]}{e}.", w)
            elif name.endswith(".mlp.experts.down_proj"):   # [E, H, I]
                for e, w in enumerate(tensor):
                    yield f"{name[:-len('down_proj')]}{e}.down_proj.weight", w
            elif name.endswith(".gate_up_proj.weight"):   # the dense and shared MLPs: [2I, H]
                yield from _gate_and_up(name[:-len("gate_up_proj.weight")], tensor)
            else:
                yield name, tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


def _gate_and_up(prefix: str, w: torch.Tensor):
    """w [2I, H], gate rows then up rows -> (prefix + gate_proj.weight, [I, H]), (prefix + up_proj.weight, [I, H])."""
    half = w.shape[0] // 2
    yield prefix + "gate_proj.weight", w[:half]
    yield prefix + "up_proj.weight", w[half:]
