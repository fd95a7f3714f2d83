"""Kolibri 1.1 (HF Kolibri1_1ForCausalLM) within its dense budget (kolibri1_1_config.py): Kolibri 1's four-norm layers
(kolibri.py) whose attention has per-head q/k RMSNorms and either a sliding window and rope, or (an indexed layer) no
rope and keys and values rounded to NVFP4 before attending: E2M1 values with one E4M3 scale per 16 dims, the
rounding HF runs in float32.  An indexed layer that reads an earlier layer's keys and values has no k/v projections
and attends over that layer's pool layer (its own stays unused).  The mlp_only_layers have a dense SwiGLU MLP.
One rank, no FP8, no native one-call decode.  Notation: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""

import dataclasses

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .glm4 import Glm4DecoderLayer
from .kolibri import Kolibri1ForCausalLM
from .laguna import expert_layer_linears
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaForCausalLM, LlamaMLP
from .moe import SparseMoeBlock
from .packed_linear import linear

NVFP4_BLOCK, E2M1_MAX = 16, 6.0


def nvfp4_round(x: torch.Tensor) -> torch.Tensor:
    """x [..., D] rounded to NVFP4 and back, in float32: each block of 16 dims scaled by its max / 6 rounded to E4M3
    (within 2^-9..448), its values rounded to E2M1 (steps of 0.5 below 2, 1 below 4, 2 up to 6, ties to even)."""
    blocks = x.float().unflatten(-1, (-1, NVFP4_BLOCK))  # [..., D/16, 16]
    scale = (blocks.abs().amax(-1, keepdim=True) / E2M1_MAX).clamp(2 ** -9, 448).to(torch.float8_e4m3fn).float()
    scaled = blocks / scale
    size = scaled.abs().clamp(max=E2M1_MAX)
    step = torch.where(size < 2, 0.5, torch.where(size < 4, 1.0, 2.0))
    return (torch.round(size / step) * step * scaled.sign() * scale).flatten(-2).to(x.dtype)


class IndexedAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        k = c.kolibri1_1
        self.layer_id, self.attn_backend, self.eps = layer_id, attn_backend, c.rms_norm_eps
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.kv_layer, self.reuses_kv = k.kv_source[layer_id], k.reuses_kv(layer_id)
        self.indexed, self.rope = layer_id in k.indexed, layer_id not in c.nope_layers
        q, kv = c.num_heads * c.head_dim, 0 if self.reuses_kv else 2 * c.num_kv_heads * c.head_dim
        self.qkv_proj = param(q + kv, c.hidden_size, dtype=dtype, device=device)  # [Hq*D (+ 2*Hkv*D), H]
        self.q_norm = param(c.head_dim, dtype=dtype, device=device)  # [D]
        self.k_norm = None if self.reuses_kv else param(c.head_dim, dtype=dtype, device=device)  # [D]
        self.o_proj = param(c.hidden_size, q, dtype=dtype, device=device)  # [H, Hq*D]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool unless it reads an earlier layer's."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj).view(T, -1, self.head_dim)  # [T, Hq (+ 2Hkv), D]
        q = rms_norm(qkv[:, :hq], self.q_norm, self.eps)  # [T, Hq, D]
        if self.reuses_kv:   # indexed, so no rope
            o = self.attn_backend.attend(q, self.kv_layer, fb)  # [T, Hq, D]
            return linear(o.reshape(T, -1), self.o_proj)  # [T, H]
        qk = torch.cat((q, rms_norm(qkv[:, hq:hq + hkv], self.k_norm, self.eps)), dim=1)  # [T, Hq+Hkv, D]
        qk = rotary.apply_(qk) if self.rope else qk
        k, v = qk[:, hq:], qkv[:, hq + hkv:]  # [T, Hkv, D] each
        if self.indexed:
            k, v = nvfp4_round(k), nvfp4_round(v)
        o = self.attn_backend.forward(qk[:, :hq], k, v, self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(T, -1), self.o_proj)  # [T, H]

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this attention's weights under `prefix`."""
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        t = {prefix + "q_proj.weight": (self.qkv_proj[:q], False), prefix + "q_norm.weight": (self.q_norm, False),
             prefix + "o_proj.weight": (self.o_proj, False)}
        if not self.reuses_kv:
            t.update({prefix + "k_proj.weight": (self.qkv_proj[q:q + kv], False),
                      prefix + "v_proj.weight": (self.qkv_proj[q + kv:], False),
                      prefix + "k_norm.weight": (self.k_norm, False)})
        return t


class Kolibri1_1ForCausalLM(Kolibri1ForCausalLM):
    """Kolibri1ForCausalLM's contract with IndexedAttention and the dense MLPs of mlp_only_layers."""

    LAYER_KIND = "indexed four-norm"

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        if layer_id in c.moe.sparse_layers:
            mlp = SparseMoeBlock(c.hidden_size, c.moe, dtype, device)
        else:
            mlp = LlamaMLP(dataclasses.replace(c, intermediate_size=c.kolibri1_1.dense_intermediate_size), dtype, device)
        layer = Glm4DecoderLayer(c, layer_id, attn_backend, dtype, device, mlp=mlp)
        layer.self_attn = IndexedAttention(c, layer_id, attn_backend, dtype, device)
        return layer

    def _linear_weights(self) -> list:
        return expert_layer_linears(self)

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        if isinstance(mlp, SparseMoeBlock):
            return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")
        return LlamaForCausalLM._mlp_targets(self, layer_id, mlp)

    def _weight_targets(self) -> dict:
        return self._own_attention_targets()
