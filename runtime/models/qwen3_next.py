"""Qwen3-Next and Qwen3.5 (HF Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM): hybrid stacks of
gated delta-net layers (gated_delta_net.py) and gated full-attention layers, with Qwen2-MoE's experts (a shared expert
behind a sigmoid gate) or a dense SwiGLU MLP after each.

The attention layers: q_proj gives each head its query and an output gate ([q_h | gate_h] per head), per-head q/k
norms, partial rotary, and the attention output times sigmoid(gate) before o_proj.  Every norm of the residual stream
and the q/k norms multiply by (1 + weight) in float32 (layers.gemma_rms_norm); the delta net's own norm by weight.
Only the attention layers have KV in the pool (ModelConfig.kv_layers), numbered among themselves.
Qwen3-Next's checkpoints group in_proj_qkvz and in_proj_ba by key head; they are regrouped at load into Qwen3.5's
in_proj_qkv, in_proj_z, in_proj_b and in_proj_a.
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gated_delta_net import GatedDeltaNet, delta_net_states
from .hybrid_model import RecurrentHybridForCausalLM
from .layer_ops import Rotary
from .layers import gemma_rms_norm, param
from .llama import LlamaAttention
from .moe import SparseMoeBlock
from .multimodal_text import split_stacked_experts
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates


class GatedAttention(LlamaAttention):
    """Full attention with per-head (1 + weight) q/k norms and a sigmoid output gate.  qkv_proj holds
    [q | k | v | gate] rows; layer_id is this layer's place among the attention layers (its KV pool layer)."""

    def __init__(self, c: ModelConfig, kv_layer: int, attn_backend, dtype, device):
        super().__init__(c, kv_layer, attn_backend, dtype, device)
        self.qkv_proj = param(2 * self.q_size + 2 * self.kv_size, c.hidden_size, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkvg = linear(x, self.qkv_proj)  # [T, (2Hq+2Hkv)*D]
        qkv, gate = qkvg.split([self.q_size + 2 * self.kv_size, self.q_size], dim=1)
        qkv = qkv.view(T, hq + 2 * hkv, D)
        qk = rotary.apply_(gemma_rms_norm(qkv[:, :hq + hkv], self.qk_norm, self.eps))  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        o = o.reshape(T, self.q_size) * torch.sigmoid(gate)  # [T, Hq*D]
        return linear(o, self.o_proj)  # [T, H]


class HybridLayer(nn.Module):
    """x + mixer(norm(x)), then x + mlp(norm(x)); the mixer a GatedDeltaNet or a GatedAttention."""

    norm = staticmethod(gemma_rms_norm)   # lara_mini.py: weight, not 1 + weight

    def __init__(self, c: ModelConfig, mixer: nn.Module, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.mixer, self.mlp = mixer, mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.mixer(self.norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        return x + self.mlp(self.norm(x, self.post_attention_layernorm, self.eps))  # [T, H]


class Qwen3NextForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with gated delta nets and gated attention."""

    LAYER_KIND = "hybrid (gated delta-net)"
    TP_REASON = " (its gated delta-net layers run on one rank)"
    attention_class = GatedAttention   # lara_mini.py: its own attention and layer; qwen4_exp.py: its own layer
    layer_class = HybridLayer

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return delta_net_states(config.linear_attention, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, la = self.config, self.config.linear_attention
        if layer_id in la.linear_layers:
            mixer = GatedDeltaNet(la, la.linear_layers.index(layer_id), self.states, c.hidden_size, c.rms_norm_eps,
                                  dtype, device)
        else:
            mixer = self.attention_class(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return self.layer_class(c, mixer, self.make_mlp(layer_id, dtype, device), dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update(self._norm_targets(p, layer))
            mixer = layer.mixer
            if isinstance(mixer, GatedDeltaNet):
                t.update(_delta_net_targets(p + "linear_attn.", mixer))
            else:
                t.update(self.attention_targets(p + "self_attn.", mixer))
            if isinstance(layer.mlp, SparseMoeBlock):
                t.update(layer.mlp.checkpoint_targets(p + "mlp."))
            else:
                t.update(self._mlp_targets(i, layer.mlp))
        return t

    @staticmethod
    def attention_targets(p: str, attn) -> dict:
        return _attention_targets(p, attn)

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """Qwen3-Next's grouped projections regrouped (_split_packed), stacked experts split; multi-token-prediction
        weights (mtp.*) skipped."""
        la = self.config.linear_attention
        for name, tensor in named_tensors:
            if name.startswith("mtp."):
                continue
            if la.packed_projections and name.endswith(("linear_attn.in_proj_qkvz.weight", "linear_attn.in_proj_ba.weight")):
                yield from _split_packed(name, tensor, la)
            else:
                yield from split_stacked_experts(name, tensor, self.config)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


def _attention_targets(p: str, attn: GatedAttention) -> dict:
    """q_proj's rows are [q_h | gate_h] per head: q rows to qkv_proj's first block, gate rows to its last."""
    q, kv, D = attn.q_size, attn.kv_size, attn.head_dim
    w = attn.qkv_proj
    return {p + "q_proj.weight": (_Interleaved(w, q, kv, D), False),
            p + "k_proj.weight": (w[q:q + kv], False), p + "v_proj.weight": (w[q + kv:q + 2 * kv], False),
            p + "o_proj.weight": (attn.o_proj, False),
            p + "q_norm.weight": (attn.qk_norm[:attn.num_heads], True),
            p + "k_norm.weight": (attn.qk_norm[attn.num_heads:], True)}


class _Interleaved:
    """The destination of q_proj [Hq * 2D, H]: copy_ puts each head's first D rows into the q block of qkv_proj and
    its next D rows into the gate block."""

    def __init__(self, w: torch.Tensor, q: int, kv: int, D: int):
        self.w, self.q, self.kv, self.D = w, q, kv, D
        self.shape = torch.Size((2 * q, w.shape[1]))

    def copy_(self, tensor: torch.Tensor) -> None:
        heads = tensor.view(-1, 2, self.D, tensor.shape[1])  # [Hq, 2, D, H]
        self.w[:self.q].copy_(heads[:, 0].reshape(self.q, -1))
        self.w[self.q + 2 * self.kv:].copy_(heads[:, 1].reshape(self.q, -1))


def _delta_net_targets(p: str, net: GatedDeltaNet) -> dict:
    la = net.la
    C, V, Hv = la.conv_dim, la.value_dim, la.num_v_heads
    return {p + "in_proj_qkv.weight": (net.in_proj[:C], False), p + "in_proj_z.weight": (net.in_proj[C:C + V], False),
            p + "in_proj_b.weight": (net.in_proj[C + V:C + V + Hv], False),
            p + "in_proj_a.weight": (net.in_proj[C + V + Hv:], False),
            p + "conv1d.weight": (ConvWeight(net.conv_weight), False), p + "dt_bias": (net.dt_bias, False),
            p + "A_log": (net.A_log, False), p + "norm.weight": (net.norm, False),
            p + "out_proj.weight": (net.out_proj, False)}



def _split_packed(name: str, tensor: torch.Tensor, la):
    """Qwen3-Next's in_proj_qkvz [Hk * (2Dk + 2rDv), H] (per key head: q, k, its r value heads' v, their z) and
    in_proj_ba [Hk * 2r, H] (per key head: b, a of its value heads) -> Qwen3.5's in_proj_qkv, _z, _b, _a."""
    base = name[:-len("in_proj_qkvz.weight")] if name.endswith("in_proj_qkvz.weight") else name[:-len("in_proj_ba.weight")]
    Hk, r, H = la.num_k_heads, la.num_v_heads // la.num_k_heads, tensor.shape[1]
    if name.endswith("in_proj_ba.weight"):
        b, a = tensor.view(Hk, 2, r, H).unbind(1)
        yield base + "in_proj_b.weight", b.reshape(-1, H)
        yield base + "in_proj_a.weight", a.reshape(-1, H)
        return
    Dk, rDv = la.head_k_dim, r * la.head_v_dim
    q, k, v, z = tensor.view(Hk, 2 * Dk + 2 * rDv, H).split([Dk, Dk, rDv, rDv], dim=1)
    yield base + "in_proj_qkv.weight", torch.cat([q.reshape(-1, H), k.reshape(-1, H), v.reshape(-1, H)])
    yield base + "in_proj_z.weight", z.reshape(-1, H)
