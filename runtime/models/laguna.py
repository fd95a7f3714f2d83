"""Laguna (HF LagunaForCausalLM) and Mellum (MellumForCausalLM, built on it): pre-norm layers of attention with
per-head q/k RMSNorms before rope, sliding-window and full layers by layer_types (config.layer_windows), each type
rotating by its own rope (the full layers' rope_params and rotary_dim; the sliding layers' local_rope_theta and
local_rotary_dim), then the dense SwiGLU MLP or a SparseMoeBlock (moe_config.py) by mlp_layer_types.

Laguna's attention output is multiplied by softplus(g_proj(x)) before o_proj: one gate per head (gating True or
"per-head", g_proj [Hq, H]) or one per head dim ("per-element", [Hq*D, H]).  Mellum's is Qwen3-MoE's, ungated.
transformers 5 renames two of Laguna's released names in its modules and saves them back
(mlp.experts.e_score_correction_bias, mlp.shared_expert.*); both spellings are read.  Mellum's multi-token-prediction
weights (mtp.*) are skipped, as HF skips them.  One rank, no FP8, no native one-call decode.
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim, G gates.
"""

import dataclasses
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, rms_norm
from .layers import gemma_rms_norm, param
from .llama import LlamaAttention, LlamaMLP
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear
from .rope import rope_cos_sin_cache

# Laguna's released names -> transformers 5's module names (HF's conversion_mapping "laguna")
_RENAMES = ((".mlp.experts.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"),
            (".mlp.shared_expert.", ".mlp.shared_experts."))


class SoftplusGatedAttention(LlamaAttention):
    """Llama's attention with q/k norms, its output times softplus(g_proj(x)) per head or per head dim."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device, per_head: bool = True):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.g_proj = param(c.num_heads if per_head else self.q_size, c.hidden_size, dtype=dtype, device=device)  # [G, H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(self.norm_qk(qkv[:, :hq + hkv]))  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        gate = F.softplus(linear(x, self.g_proj).float()).to(o.dtype)  # [T, G] in HF's order: float32, then cast
        o = o * gate.view(T, hq, -1)  # [T, Hq, D] times [T, Hq, 1] or [T, Hq, D]
        return linear(o.reshape(T, self.q_size), self.o_proj, self.o_bias)  # [T, H]


class PreNormLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x))."""

    norm = staticmethod(rms_norm)

    def __init__(self, c: ModelConfig, attn: nn.Module, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attn, self.mlp = attn, mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attn(self.norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        return x + self.mlp(self.norm(x, self.post_attention_layernorm, self.eps))  # [T, H]


class GemmaPreNormLayer(PreNormLayer):
    """PreNormLayer with Gemma's (1 + weight) norms (MiniMax-M3, Step 3.7)."""

    norm = staticmethod(gemma_rms_norm)


class LayerTypeRopes:
    """What a model whose sliding layers rotate by their own rope (config.local_rope_theta, local_rotary_dim) beside
    the full layers' adds to its OwnLayersForCausalLM base (listed after this one)."""

    def register_local_rope(self, dtype, device, max_context: Optional[int]) -> None:
        c = self.config
        local = dataclasses.replace(c, rope_theta=c.local_rope_theta or c.rope_theta, rope_scaling=None,
                                    rotary_dim=c.local_rotary_dim)
        cache = rope_cos_sin_cache(local, max_context or c.context_length)  # [C, R_local] float32
        self.register_buffer("local_cos_sin", cache.to(device=device, dtype=dtype), persistent=False)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        full, local = Rotary(positions, self.cos_sin), Rotary(positions, self.local_cos_sin)
        return [local if window else full for window in self.config.layer_windows or [None] * len(self.layers)]


class LagunaForCausalLM(LayerTypeRopes, ExpertLayers, OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract; the sliding layers rotated by their own rope; expert_load() as
    MoEForCausalLM's."""

    LAYER_KIND = "per-layer-type rope"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        self.register_local_rope(dtype, device, max_context)

    def make_attention(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return SoftplusGatedAttention(self.config, layer_id, attn_backend, dtype, device,
                                      per_head=self.config.gate_per_head)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = (SparseMoeBlock(c.hidden_size, c.moe, dtype, device) if layer_id in c.moe.sparse_layers
               else LlamaMLP(c, dtype, device))
        return PreNormLayer(c, self.make_attention(layer_id, attn_backend, dtype, device), mlp, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        return expert_layer_linears(self)

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            if hasattr(layer.self_attn, "g_proj"):
                t[f"model.layers.{i}.self_attn.g_proj.weight"] = (layer.self_attn.g_proj, False)
        return t

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if not isinstance(mlp, SparseMoeBlock):
            return super()._mlp_targets(layer_id, mlp)
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream under transformers 5's names, without multi-token-prediction weights."""
        for name, tensor in named_tensors:
            if not name.startswith("mtp."):
                for old, new in _RENAMES:
                    name = name.replace(old, new)
                yield name, tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


def expert_layer_linears(model) -> list:
    """pack_weights' (module, name) list of layers of fused-qkv attention (and g_proj where it has one) and a dense MLP
    or a SparseMoeBlock (its shared MLP; the experts are packed on their own: moe_model.py)."""
    swaps = [(model, "lm_head")]
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        swaps += [(attn, "qkv_proj"), (attn, "o_proj")] + ([(attn, "g_proj")] if hasattr(attn, "g_proj") else [])
        if not isinstance(mlp, SparseMoeBlock):
            swaps += [(mlp, name) for name in model.MLP_LINEARS]
        elif mlp.shared_gate_up is not None:
            swaps += [(mlp, "shared_gate_up"), (mlp, "shared_down")]
    return swaps


class MellumForCausalLM(LagunaForCausalLM):
    """LagunaForCausalLM's contract with Qwen3-MoE's attention."""

    def make_attention(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return LlamaAttention(self.config, layer_id, attn_backend, dtype, device)
