"""Muse Spark's language model (HF MuseSparkTextModel with MuseSparkForConditionalGeneration's lm head), served for
text prompts: muse_config.py has its fields, muse.py the embeddings, final norm and logits it shares with Muse Glimmer.

x -> a(x) * x + b(h) * norm(h), h = attn(norm(x)), then the same around the MLP, where each residual gate's
b = sigmoid(g / temperature) and a = sqrt(max(sigmoid(-g / temperature) * (1 + b), 1e-3)) per channel from its float32
parameter g; the attention's output norm is weightless, the MLP's scales by (1 + weight) before normalising.  The
attention is Muse Glimmer's with each head's output RMS-normalised (no weight) before the gate.  Sparse layers
(config.muse.spark.sparse_layers): a float32 router on the layer's normed input (logits times output_multiplier,
sigmoid, e_score_correction_bias for the choice only, the top k renormalised with 1e-15 in the sum, times
routed_scaling_factor), the input projected to moe_hidden_size and (1 + weight) RMS-normalised, each chosen expert's
SwiGLU output through the one post_expert_norm (input-scaled) before its weight, the sum projected back.  Checkpoint
experts as transformers 5 stores them: mlp.experts.gate_up_proj [E, 2I, M], mlp.experts.down_proj [E, M, I].
One rank; notation as in llama.py, E experts, M moe_hidden_size.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaMLP
from .muse import MuseAttention, MuseGlimmerTextForCausalLM, weightless_rms_norm
from .packed_linear import linear

RESIDUAL_GATE_EPS = 1e-3   # HF's MuseSparkResidualGate's default
TOPK_EPS = 1e-15           # HF's router's norm_topk_prob_eps


def centered_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's MuseSparkTextCenteredRMSNorm: Gemma's, but 1 + weight summed in the weight's dtype (bfloat16 rounds it)."""
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * (1.0 + weight).float()).to(x.dtype)


def input_scaled_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's MuseSparkTextInputScaledRMSNorm: x times (1 + weight), rounded to x's dtype, then normalised."""
    return weightless_rms_norm((x.float() * (1.0 + weight).float()).to(x.dtype), eps)


def residual_gate(gate: torch.Tensor, temperature: float, residual: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """a * residual + b * h with b = sigmoid(gate / t), a = sqrt(max(sigmoid(-gate / t) * (1 + b), eps)); gate [H]
    float32, residual and h [T, H]."""
    w = gate / temperature
    beta = torch.sigmoid(w)
    alpha = torch.sqrt(torch.clamp(torch.sigmoid(-w) * (1.0 + beta), min=RESIDUAL_GATE_EPS))
    return (alpha * residual + beta * h).to(residual.dtype)


class MuseSparkAttention(MuseAttention):
    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(t, hq + 2 * hkv, self.head_dim)
        qk = weightless_rms_norm(qkv[:, :hq + hkv], self.eps)  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        o = weightless_rms_norm(o, self.eps).reshape(t, self.q_size)  # [T, Hq*D]
        gated = o * torch.sigmoid(linear(x, self.gate_proj, None, self.gemm_rows))  # [T, Hq*D]
        return linear(gated, self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]


class MuseSparkMoE(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        s, self.eps, self.post_eps = c.muse.spark, c.rms_norm_eps, c.muse.post_norm_eps
        self.top_k, self.scaling, self.multiplier = s.top_k, s.routed_scaling_factor, c.muse.output_multiplier
        e, i, m = s.num_experts, s.moe_intermediate_size, s.moe_hidden_size
        self.router = param(e, c.hidden_size, dtype=torch.float32, device=device)  # [E, H]
        self.correction_bias = param(e, dtype=torch.float32, device=device)  # [E]
        self.pre_expert_proj = param(m, c.hidden_size, dtype=dtype, device=device)  # [M, H]
        self.pre_expert_norm = param(m, dtype=dtype, device=device)  # [M]
        self.experts_gate_up = param(e, 2 * i, m, dtype=dtype, device=device)  # [E, 2I, M]
        self.experts_down = param(e, m, i, dtype=dtype, device=device)  # [E, M, I]
        self.post_expert_norm = param(m, dtype=dtype, device=device)  # [M]
        self.post_expert_proj = param(c.hidden_size, m, dtype=dtype, device=device)  # [H, M]
        self.tp = None

    def choose(self, x: torch.Tensor):
        """x [T, H] -> (weights [T, k] float32, expert ids [T, k])."""
        scores = torch.sigmoid(F.linear(x.float(), self.router) * self.multiplier)  # [T, E]
        ids = torch.topk(scores + self.correction_bias, self.top_k, dim=-1, sorted=False)[1]  # [T, k]
        weights = scores.gather(1, ids)  # [T, k]
        return weights / (weights.sum(-1, keepdim=True) + TOPK_EPS) * self.scaling, ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        weights, ids = self.choose(x)
        h = centered_rms_norm(linear(x, self.pre_expert_proj), self.pre_expert_norm, self.eps)  # [T, M]
        out = torch.zeros_like(h)  # [T, M]
        for e in ids.unique().tolist():
            rows, slot = torch.where(ids == e)
            gate, up = F.linear(h[rows], self.experts_gate_up[e]).chunk(2, dim=-1)  # [n, I] each
            y = F.linear(F.silu(gate) * up, self.experts_down[e])  # [n, M]
            y = input_scaled_rms_norm(y, self.post_expert_norm, self.post_eps) * weights[rows, slot, None]
            out.index_add_(0, rows, y.to(out.dtype))
        return linear(out, self.post_expert_proj)  # [T, H]

    def checkpoint_targets(self, prefix: str) -> dict:
        names = {"gate.weight": self.router, "gate.e_score_correction_bias": self.correction_bias,
                 "pre_expert_proj.weight": self.pre_expert_proj, "pre_expert_norm.weight": self.pre_expert_norm,
                 "experts.gate_up_proj": self.experts_gate_up, "experts.down_proj": self.experts_down,
                 "experts.post_expert_norm.weight": self.post_expert_norm,
                 "post_expert_proj.weight": self.post_expert_proj}
        return {prefix + name: (dst, False) for name, dst in names.items()}


NORMS = ("input_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
GATES = ("post_attention_residual_gate", "post_feedforward_residual_gate")


class MuseSparkDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps, self.post_eps = c.rms_norm_eps, c.muse.post_norm_eps
        self.temperature = c.muse.spark.residual_gate_temperature
        for name in NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        for name in GATES:
            setattr(self, name, param(c.hidden_size, dtype=torch.float32, device=device))  # [H], float32 as HF's
        self.self_attn = MuseSparkAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = (MuseSparkMoE(c, dtype, device) if layer_id in c.muse.spark.sparse_layers
                    else LlamaMLP(c, dtype, device))

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.self_attn(centered_rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = residual_gate(self.post_attention_residual_gate, self.temperature, x,
                          weightless_rms_norm(h, self.post_eps))  # [T, H]
        h = self.mlp(centered_rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        h = input_scaled_rms_norm(h, self.post_feedforward_layernorm, self.post_eps)  # [T, H]
        return residual_gate(self.post_feedforward_residual_gate, self.temperature, x, h)  # [T, H]


class MuseSparkTextForCausalLM(MuseGlimmerTextForCausalLM):
    """MuseGlimmerTextForCausalLM's contract with Muse Spark's layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return MuseSparkDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            swaps += [(attn, "qkv_proj"), (attn, "o_proj"), (attn, "gate_proj")]
            if isinstance(mlp, MuseSparkMoE):
                swaps += [(mlp, "pre_expert_proj"), (mlp, "post_expert_proj")]
            else:
                swaps += [(mlp, name) for name in self.MLP_LINEARS]
        return swaps

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + suffix: (getattr(layer, name), False)
                for names, suffix in ((NORMS, ".weight"), (GATES, ".gate")) for name in names}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.checkpoint_targets(f"model.layers.{layer_id}.mlp.")
