"""JetMoE (HF JetMoeForCausalLM): pre-norm layers (RMSNorms of epsilon 1e-6; the final one config.rms_norm_eps) of a
mixture of attention experts and a mixture of SwiGLU experts (jetmoe_config.py), each routed by its own router to the
top k experts of the token, weighted by a softmax over their logits (in float32).

Attention: slot s of a token (its s-th chosen expert e) gives a query of Hkv heads, input_linear[e] x; K and V come
from kv_proj, shared by every slot.  HF numbers the query heads slot-major (s * Hkv + h) and repeats K/V heads whole
(head h for query head s * Hkv + h); the attention kernels group query heads per K/V head, so the queries run
head-major (h * k + s) and the output returns slot-major; then sum_s gate_s * output_linear[e_s] o_s + bias.
MLP: sum_s gate_s * output_linear[e_s] (silu(gate) * up of input_linear[e_s] x) + bias.
Experts run in plain torch, one matrix product per chosen expert.  On one rank, op by op.
Notation: T tokens, H hidden, E experts, k chosen, Hkv heads of D dims, I expert width.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, rms_norm
from .layers import param
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear

LAYER_EPS = 1e-6   # HF's JetMoeRMSNorm default: the layers' norms do not read rms_norm_eps


def route(x: torch.Tensor, router: torch.Tensor, k: int):
    """x [T, H] -> (gates [T, k] in x's dtype, expert ids [T, k]): softmax over the top k float32 logits."""
    top, ids = torch.topk(linear(x, router).float(), k, dim=-1)  # [T, k] each
    return torch.softmax(top, dim=-1).to(x.dtype), ids


def by_expert(x: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Row n of x [N, in] through expert ids[n]'s weight [E, out, in] -> [N, out]."""
    out = x.new_empty(x.shape[0], weight.shape[1])  # [N, out]
    for e in ids.unique().tolist():
        rows = (ids == e).nonzero().squeeze(1)  # [n_e]
        out[rows] = x[rows] @ weight[e].t()  # [n_e, out]
    return out


class MixtureOfAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.layer_id, self.attn_backend = layer_id, attn_backend
        self.k, self.kv_heads, self.head_dim = c.moe.top_k, c.num_kv_heads, c.head_dim
        e, width, h = c.moe.num_experts, c.num_kv_heads * c.head_dim, c.hidden_size
        self.router = param(e, h, dtype=dtype, device=device)  # [E, H]
        self.input_linear = param(e, width, h, dtype=dtype, device=device)  # [E, Hkv*D, H]
        self.output_linear = param(e, h, width, dtype=dtype, device=device)  # [E, H, Hkv*D]
        self.bias = param(h, dtype=dtype, device=device)  # [H]
        self.kv_proj = param(2 * width, h, dtype=dtype, device=device)  # [2*Hkv*D, H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, k, hkv, d = x.shape[0], self.k, self.kv_heads, self.head_dim
        gates, ids = route(x, self.router, k)  # [T, k] each
        q = by_expert(x.repeat_interleave(k, dim=0), self.input_linear, ids.reshape(-1))  # [T*k, Hkv*D], slot-major
        q = self.to_kernel_heads(q, T)  # [T, Hkv*k, D] head-major
        kv = linear(x, self.kv_proj).view(T, 2 * hkv, d)  # [T, 2Hkv, D]
        qk = rotary.apply_(torch.cat((q, kv[:, :hkv]), dim=1))  # [T, Hkv*k+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hkv * k], qk[:, hkv * k:], kv[:, hkv:], self.layer_id, fb)  # [T, Hkv*k, D]
        o = self.from_kernel_heads(o, T)  # [T*k, Hkv*D] slot-major
        out = by_expert(o, self.output_linear, ids.reshape(-1)) * gates.reshape(-1, 1)  # [T*k, H]
        return out.view(T, k, -1).sum(dim=1) + self.bias  # [T, H]


    def to_kernel_heads(self, q: torch.Tensor, T: int) -> torch.Tensor:
        """Queries [T*k, Hkv*D], slot-major per token -> [T, Hkv*k, D], each K/V head's k queries together."""
        return q.view(T, self.k, self.kv_heads, self.head_dim).transpose(1, 2).reshape(T, -1, self.head_dim)

    def from_kernel_heads(self, o: torch.Tensor, T: int) -> torch.Tensor:
        """Attention output [T, Hkv*k, D] head-major -> [T*k, Hkv*D] slot-major."""
        return o.view(T, self.kv_heads, self.k, self.head_dim).transpose(1, 2).reshape(T * self.k, -1)


class MixtureOfExperts(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.k, self.inter = c.moe.top_k, c.moe.intermediate_size
        e, h = c.moe.num_experts, c.hidden_size
        self.router = param(e, h, dtype=dtype, device=device)  # [E, H]
        self.input_linear = param(e, 2 * self.inter, h, dtype=dtype, device=device)  # [E, 2I, H]: gate, then up
        self.output_linear = param(e, h, self.inter, dtype=dtype, device=device)  # [E, H, I]
        self.bias = param(h, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        T, k = x.shape[0], self.k
        gates, ids = route(x, self.router, k)  # [T, k] each
        h = by_expert(x.repeat_interleave(k, dim=0), self.input_linear, ids.reshape(-1))  # [T*k, 2I]
        h = F.silu(h[:, :self.inter]) * h[:, self.inter:]  # [T*k, I]
        out = by_expert(h, self.output_linear, ids.reshape(-1)) * gates.reshape(-1, 1)  # [T*k, H]
        return out.view(T, k, -1).sum(dim=1) + self.bias  # [T, H]


class JetMoeLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attention = MixtureOfAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = MixtureOfExperts(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attention(rms_norm(x, self.input_layernorm, LAYER_EPS), rotary, fb)  # [T, H]
        return x + self.mlp(rms_norm(x, self.post_attention_layernorm, LAYER_EPS))  # [T, H]


class JetMoeForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with JetMoE's layers; its weights stay dense (pack_weights packs the lm head)."""

    LAYER_KIND = "mixture-of-attention"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return JetMoeLayer(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _linear_weights(self) -> list:
        return [(self, "lm_head")] + [(layer.self_attention, "kv_proj") for layer in self.layers]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, attn, mlp = f"model.layers.{i}.", layer.self_attention, layer.mlp
            t.update({p + "input_layernorm.weight": (layer.input_layernorm, False),
                      p + "post_attention_layernorm.weight": (layer.post_attention_layernorm, False),
                      p + "self_attention.kv_proj.weight": (attn.kv_proj, False)})
            for prefix, block in ((p + "self_attention.experts.", attn), (p + "mlp.", mlp)):
                t.update({prefix + "router.layer.weight": (block.router, False), prefix + "bias": (block.bias, False),
                          prefix + "input_linear.weight": (block.input_linear, False),
                          prefix + "output_linear.weight": (block.output_linear, False)})
        return t
