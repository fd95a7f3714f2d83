"""Step 3.7's language model (HF Step3p7TextModel; fields: step3_config.py), served for text prompts inside
Step3p7ForConditionalGeneration (multimodal_wrappers.py): Laguna's model (laguna.py: sliding and full layers, each type
rotated by its own rope) with Gemma's RMSNorms (1 + weight) everywhere, each layer's own query heads, its attention
output times sigmoid(g_proj(x)) per head, and the dense MLP, shared expert and experts clamped per layer.

Checkpoint names as released (and as transformers 5 saves them): model.layers.{l}.moe.{gate_proj, up_proj} [E, I, H]
and moe.down_proj [E, H, I] stacked, moe.gate.weight, moe.router_bias (the correction bias), share_expert.*; the
module names (mlp.experts.gate_up_proj, mlp.shared_experts.*) are read too.  Multi-token-prediction layers (those
after the last) are skipped, as HF skips them.  One rank, no FP8, no native one-call decode.
Notation as in llama.py: T tokens, H hidden, Hq this layer's query heads, Hkv K/V heads, D head_dim, I widths.
"""

import dataclasses
import re
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .laguna import GemmaPreNormLayer, LagunaForCausalLM
from .layer_ops import Rotary
from .layers import gemma_rms_norm, param
from .llama import LlamaAttention, LlamaMLP
from .moe import SparseMoeBlock, _use_triton, grouped_experts
from .multimodal_text import split_stacked_experts
from .packed_linear import linear

_RENAMES = ((".moe.gate.weight", ".mlp.gate.weight"), (".moe.router_bias", ".mlp.gate.e_score_correction_bias"),
            (".share_expert.", ".mlp.shared_experts."))
_STACKED = re.compile(r"^(.*)\.moe\.(gate_proj|up_proj|down_proj)\.weight$")


def clamped_swiglu(gate_up: torch.Tensor, limit: Optional[float]) -> torch.Tensor:
    """[n, 2I] -> min(silu(gate), limit) * clamp(up, -limit, limit) [n, I] (plain silu(gate) * up without a limit)."""
    gate, up = gate_up.chunk(2, dim=-1)
    if limit is None:
        return F.silu(gate) * up
    return F.silu(gate).clamp(max=limit) * up.clamp(min=-limit, max=limit)


class Step3Attention(LlamaAttention):
    """Llama's attention with this layer's query heads, Gemma's per-head q/k norms before rope and a sigmoid output
    gate per head."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        c = dataclasses.replace(c, num_heads=c.step3.heads[layer_id])
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.g_proj = param(c.num_heads, c.hidden_size, dtype=dtype, device=device)  # [Hq, H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(gemma_rms_norm(qkv[:, :hq + hkv], self.qk_norm, self.eps))  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        o = o * self.gate(x).unsqueeze(-1)  # [T, Hq, D] times [T, Hq, 1]
        return linear(o.reshape(T, self.q_size), self.o_proj, self.o_bias)  # [T, H]

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> each head's output gate [T, Hq]."""
        return torch.sigmoid(linear(x, self.g_proj))

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this attention's weights under `prefix`."""
        q, kv, t = self.q_size, self.kv_size, {}
        for name, lo, hi in (("q_proj", 0, q), ("k_proj", q, q + kv), ("v_proj", q + kv, q + 2 * kv)):
            t[f"{prefix}{name}.weight"] = (self.qkv_proj[lo:hi], False)
            if self.qkv_bias is not None:
                t[f"{prefix}{name}.bias"] = (self.qkv_bias[lo:hi], False)
        t[prefix + "o_proj.weight"] = (self.o_proj, False)
        if self.o_bias is not None:
            t[prefix + "o_proj.bias"] = (self.o_bias, False)
        t[prefix + "q_norm.weight"] = (self.qk_norm[:self.num_heads], True)
        t[prefix + "k_norm.weight"] = (self.qk_norm[self.num_heads:], True)
        t[prefix + "g_proj.weight"] = (self.g_proj, False)
        return t


class ClampedMLP(LlamaMLP):
    """Llama's SwiGLU MLP with clamped_swiglu's limit."""

    def __init__(self, c: ModelConfig, limit: Optional[float], dtype, device):
        super().__init__(c, dtype, device)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        return linear(clamped_swiglu(linear(x, self.gate_up_proj), self.limit), self.down_proj)  # [T, 2I] -> [T, H]


class ClampedMoeBlock(SparseMoeBlock):
    """SparseMoeBlock whose experts and shared expert run clamped_swiglu, each with its own limit (the fused Triton
    kernel's act on CUDA)."""

    def __init__(self, c: ModelConfig, layer_id: int, dtype, device):
        super().__init__(c.hidden_size, c.moe, dtype, device)
        self.limit, self.shared_limit = c.step3.limits[layer_id], c.step3.shared_limits[layer_id]
        self.act = lambda gate_up: clamped_swiglu(gate_up, self.limit)

    def experts_out(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The chosen experts' weighted sum plus the shared expert's.  x: [T, H] -> [T, H]."""
        if self.packed_experts is None and _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        else:
            experts = self.packed_experts or (self.w13, self.w2)
            out = grouped_experts(x, *experts, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        shared = clamped_swiglu(linear(x, self.shared_gate_up), self.shared_limit)  # [T, S]
        return out + linear(shared, self.shared_down)  # [T, H]


class Step3ForCausalLM(LagunaForCausalLM):
    """LagunaForCausalLM's contract with Step 3.7's layers."""

    LAYER_KIND = "Step 3.7"

    def make_attention(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return Step3Attention(self.config, layer_id, attn_backend, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = (ClampedMoeBlock(c, layer_id, dtype, device) if layer_id in c.moe.sparse_layers
               else ClampedMLP(c, c.step3.shared_limits[layer_id], dtype, device))
        return GemmaPreNormLayer(c, self.make_attention(layer_id, attn_backend, dtype, device), mlp, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        return self._own_attention_targets()

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream under the module names: released stacks split per expert, the multi-token-prediction
        layers left out."""
        mtp = re.compile(r"^model\.layers\.(\d+)\.")
        for name, tensor in named_tensors:
            layer = mtp.match(name)
            if layer and int(layer.group(1)) >= self.config.num_layers:
                continue
            for old, new in _RENAMES:
                name = name.replace(old, new)
            stacked = _STACKED.match(name)
            if stacked:
                prefix, kind = stacked.groups()
                for e, w in enumerate(tensor):   # w: [I, H] or [H, I]
                    yield f"{prefix}.mlp.experts.{e}.{kind}.weight", w
                continue
            yield from split_stacked_experts(name, tensor, self.config)
