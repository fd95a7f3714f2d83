"""DBRX (HF DbrxForCausalLM): pre-norm layers of LayerNorms without a bias (nn.LayerNorm(bias=False), the final norm
too), the Llama attention on a fused Wqkv clamped to [-clip_qkv, clip_qkv] with no biases, and a SparseMoeBlock in
every layer (moe_router.py: softmax scores in the model dtype, the top moe_top_k divided by their p-norm).

Checkpoint layout (the hub's, and transformers 5's save_pretrained), renamed by checkpoint_tensors to the Llama and
Qwen names, one tensor per expert: transformer.wte.weight, transformer.norm_f.weight, lm_head.weight and per block
transformer.blocks.{i}.norm_attn_norm.{norm_1, norm_2}.weight [H], .attn.Wqkv.weight [(Hq+2Hkv)*D, H] (q, k, v
rows), .attn.out_proj.weight [H, Hq*D], ffn.router.layer.weight [E, H] and ffn.experts.mlp.{w1 (gate), v1 (up),
w2 (down, transposed)} [E*I, H].  One rank (OwnLayersForCausalLM).  Notation as in llama.py, E experts, I their width.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .layers import param
from .moe_model import ExpertLayers
from .own_layers import OwnLayersForCausalLM
from .phimoe import PhimoeDecoderLayer


class BiasFreeLayerNorm(nn.Module):
    """HF nn.LayerNorm(bias=False) over the last dim: weight [H]."""

    def __init__(self, size: int, eps: float, dtype, device):
        super().__init__()
        self.eps = eps
        self.weight = param(size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps)  # [T, H]


class DbrxDecoderLayer(PhimoeDecoderLayer):
    norm_class = BiasFreeLayerNorm


class DbrxForCausalLM(ExpertLayers, OwnLayersForCausalLM):
    """MoEForCausalLM's contract (expert_load()) on one rank."""

    loads_fp8_checkpoints = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return DbrxDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.norm, None, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
        return swaps

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + "input_layernorm.weight": (layer.input_layernorm.weight, False),
                prefix + "post_attention_layernorm.weight": (layer.post_attention_layernorm.weight, False)}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        c = self.config
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        shape = (c.moe.num_experts, c.moe.intermediate_size, c.hidden_size)      # [E, I, H]
        return (pair for name, t in named_tensors for pair in _our_names(name, t, q, kv, shape))

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


_OUTER = {"transformer.wte.weight": "model.embed_tokens.weight", "transformer.norm_f.weight": "model.norm.weight"}
_BLOCK = {"norm_attn_norm.norm_1.weight": "input_layernorm.weight",
          "norm_attn_norm.norm_2.weight": "post_attention_layernorm.weight",
          "norm_attn_norm.attn.out_proj.weight": "self_attn.o_proj.weight", "ffn.router.layer.weight": "mlp.gate.weight"}
_EXPERTS = {"ffn.experts.mlp.w1": "gate_proj", "ffn.experts.mlp.v1": "up_proj", "ffn.experts.mlp.w2": "down_proj"}


def _our_names(name: str, t: torch.Tensor, q: int, kv: int, expert_shape: tuple):
    """One DBRX checkpoint tensor -> (name, tensor) pairs in the Llama/Qwen names (q, kv: the q and k rows of Wqkv)."""
    if name in _OUTER:
        yield _OUTER[name], t
        return
    parts = name.split(".")
    if not name.startswith("transformer.blocks.") or len(parts) < 4:
        yield name, t
        return
    prefix, leaf = f"model.layers.{parts[2]}.", ".".join(parts[3:])
    if leaf in _BLOCK:
        yield prefix + _BLOCK[leaf], t
    elif leaf == "norm_attn_norm.attn.Wqkv.weight":
        for proj, rows in zip(("q_proj", "k_proj", "v_proj"), t.split([q, kv, kv])):
            yield prefix + f"self_attn.{proj}.weight", rows                   # [Hq*D or Hkv*D, H]
    elif leaf in _EXPERTS:
        kind = _EXPERTS[leaf]
        for e, w in enumerate(t.view(expert_shape)):                          # [I, H] each
            yield prefix + f"mlp.experts.{e}.{kind}.weight", w.t() if kind == "down_proj" else w   # down: [H, I]
    else:
        yield name, t
