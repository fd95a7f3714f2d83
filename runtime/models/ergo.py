"""Ergo (HF ErgoForCausalLM; fields: ergo_config.py): DeepSeek-V3's model with its own layer.

Layer: x = gate_a(norm(attn(norm(x))), x), then x = gate_f(norm(mlp(norm(x))), x), where a residual gate of weight w
[H] mixes sigmoid(w) * branch + sqrt(1 + sigmoid(w)) * exp(-softplus(w) / 2) * residual.  The residual stream, the
norms (their weights too) and the router run in float32 whatever the model dtype, as HF keeps them.
Attention: Llama's kernels on a fused q/k/v projection with per-head q/k RMSNorms; the sliding layers rotate
interleaved pairs (read into rotate-half order: interleaved_rope.py), the full layers have no rope and scale q and k
by sqrt(global_attention_scale).  MLPs are relu^2 without a gate: the dense layers', and on sparse layers the chosen
experts' (each output RMSNormed by its expert's own weight, then weighted) plus a shared expert's (RMSNormed).

Checkpoints keep Ergo's own names (HF's conversion_mapping reads them): layers.{i}.attention.{wqkv, wo, q_norm, k_norm},
attention_norm, post_attention_norm, ffn_norm, post_ffn_norm, post_{attention,ffn}_residual.scale,
feed_forward.{up, down} (dense), feed_forward.{gate_kernel [H, E], router_bias, up_proj [E, H, I], down_proj
[E, I, H], expert_output_norm.scale [E, H], shared_up_proj [H, S], shared_down_proj [S, H],
shared_expert_output_norm.scale}; tok_embeddings, norm, output.  One rank, op by op.
Notation: T tokens, H hidden, I expert width, S shared width, E experts, k chosen.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention
from .moe_router import route
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear
from .quant_linear import embed


def norm32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's ErgoRMSNorm without its cast back: x and weight in float32 -> [.., H] float32."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * weight.float()


def relu2(x: torch.Tensor) -> torch.Tensor:
    return torch.square(F.relu(x))


def residual_gate(branch: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The learned mix of a sublayer's normed output and the residual stream, both [T, H] float32."""
    gate = torch.sigmoid(weight)  # [H]
    return gate * branch + torch.sqrt(1.0 + gate) * torch.exp(-0.5 * F.softplus(weight)) * residual


class ErgoAttention(LlamaAttention):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.qk_norm = param(c.num_heads + c.num_kv_heads, c.head_dim, dtype=torch.float32, device=device)
        scale = c.global_attention_scale
        self.qk_scale = scale ** 0.5 if not self.rope and scale is not None else None

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj).view(t, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = norm32(qkv[:, :hq + hkv], self.qk_norm, self.eps).to(x.dtype)  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        if self.qk_scale is not None:
            qk = qk * self.qk_scale  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(t, self.q_size), self.o_proj)  # [T, H]


class ErgoMLP(nn.Module):
    """relu^2 without a gate: up [I, H], down [H, I]."""

    def __init__(self, hidden: int, width: int, dtype, device):
        super().__init__()
        self.up = param(width, hidden, dtype=dtype, device=device)  # [I, H]
        self.down = param(hidden, width, dtype=dtype, device=device)  # [H, I]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(relu2(linear(x, self.up)), self.down)  # [T, H]


class ErgoMoE(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        m, h = c.moe, c.hidden_size
        self.moe, self.eps = m, c.rms_norm_eps
        self.gate_kernel = param(h, m.num_experts, dtype=torch.float32, device=device)  # [H, E]
        self.router_bias = param(m.num_experts, dtype=torch.float32, device=device)  # [E]
        self.up_proj = param(m.num_experts, h, m.intermediate_size, dtype=dtype, device=device)  # [E, H, I]
        self.down_proj = param(m.num_experts, m.intermediate_size, h, dtype=dtype, device=device)  # [E, I, H]
        self.expert_norms = param(m.num_experts, h, dtype=torch.float32, device=device)  # [E, H]
        self.shared_up = param(h, m.shared_expert_intermediate_size, dtype=dtype, device=device)  # [H, S]
        self.shared_down = param(m.shared_expert_intermediate_size, h, dtype=dtype, device=device)  # [S, H]
        self.shared_norm = param(h, dtype=torch.float32, device=device)  # [H]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        t, h = x.shape
        weights, ids = route(x.float() @ self.gate_kernel, self.moe, self.router_bias)  # [T, k] each
        flat = ids.reshape(-1)  # [T*k]
        rows = x.repeat_interleave(ids.shape[1], dim=0)  # [T*k, H]
        out = torch.empty_like(rows)  # [T*k, H]
        for e in flat.unique().tolist():
            sel = (flat == e).nonzero().squeeze(1)  # [n_e]
            out[sel] = relu2(rows[sel] @ self.up_proj[e]) @ self.down_proj[e]  # [n_e, H]
        out = norm32(out, self.expert_norms[flat], self.eps).to(x.dtype)  # [T*k, H]
        routed = (out.view(t, -1, h).float() * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)  # [T, H]
        shared = relu2(x @ self.shared_up) @ self.shared_down  # [T, H]
        return routed + norm32(shared, self.shared_norm, self.eps).to(x.dtype)  # [T, H]


_NORMS = ("attention_norm", "post_attention_norm", "ffn_norm", "post_ffn_norm", "attention_gate", "ffn_gate")


class ErgoLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        for name in _NORMS:
            setattr(self, name, param(c.hidden_size, dtype=torch.float32, device=device))  # [H]
        self.self_attn = ErgoAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = (ErgoMoE(c, dtype, device) if layer_id in c.moe.sparse_layers
                    else ErgoMLP(c.hidden_size, c.intermediate_size, dtype, device))

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] float32 residual stream -> [T, H] float32."""
        dtype = self.self_attn.qkv_proj.dtype
        h = self.self_attn(norm32(x, self.attention_norm, self.eps).to(dtype), rotary, fb)  # [T, H]
        x = residual_gate(norm32(h, self.post_attention_norm, self.eps), x, self.attention_gate)  # [T, H]
        h = self.mlp(norm32(x, self.ffn_norm, self.eps).to(dtype))  # [T, H]
        return residual_gate(norm32(h, self.post_ffn_norm, self.eps), x, self.ffn_gate)  # [T, H]


class ErgoForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with Ergo's layers; the experts' weights stay dense."""

    LAYER_KIND = "residual-gated"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def __init__(self, config: ModelConfig, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.norm = param(config.hidden_size, dtype=torch.float32, device=self.embed_tokens.device)  # [H]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return ErgoLayer(self.config, layer_id, attn_backend, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        return embed(fb.input_ids, self.embed_tokens, self.dtype).float()  # [T, H] float32

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return norm32(x, self.norm, self.config.rms_norm_eps).to(self.dtype)  # [T, H]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
            swaps += [(layer.mlp, "up"), (layer.mlp, "down")] if isinstance(layer.mlp, ErgoMLP) else []
        return swaps

    def _outer_targets(self) -> dict:
        return {"tok_embeddings.weight": (self.embed_tokens, False), "norm.weight": (self.norm, False),
                "output.weight": (self.lm_head, False)}

    def _weight_targets(self) -> dict:
        t, c = self._outer_targets(), self.config
        for i, layer in enumerate(self.layers):
            p, attn, mlp = f"layers.{i}.", layer.self_attn, layer.mlp
            t.update({p + "attention.wqkv.weight": (attn.qkv_proj, False), p + "attention.wo.weight": (attn.o_proj, False),
                      p + "attention.q_norm.weight": (attn.qk_norm[:c.num_heads], True),
                      p + "attention.k_norm.weight": (attn.qk_norm[c.num_heads:], True),
                      p + "post_attention_residual.scale": (layer.attention_gate, False),
                      p + "post_ffn_residual.scale": (layer.ffn_gate, False)})
            t.update({p + name + ".weight": (getattr(layer, name), False) for name in _NORMS[:4]})
            f = p + "feed_forward."
            if isinstance(mlp, ErgoMLP):
                t.update({f + "up.weight": (mlp.up, False), f + "down.weight": (mlp.down, False)})
                continue
            t.update({f + "gate_kernel": (mlp.gate_kernel, False), f + "router_bias": (mlp.router_bias, False),
                      f + "up_proj": (mlp.up_proj, False), f + "down_proj": (mlp.down_proj, False),
                      f + "expert_output_norm.scale": (mlp.expert_norms, False),
                      f + "shared_up_proj": (mlp.shared_up, False), f + "shared_down_proj": (mlp.shared_down, False),
                      f + "shared_expert_output_norm.scale": (mlp.shared_norm, False)})
        return t

    def checkpoint_tensors(self, named_tensors):
        """The checkpoint stream with each q and k head's dims (wqkv's rows, the q/k norms) in rotate-half order."""
        c = self.config
        order, qk_rows = interleaved_to_half_order(c.head_dim, c.head_dim), (c.num_heads + c.num_kv_heads) * c.head_dim
        for name, tensor in named_tensors:
            if name.endswith((".q_norm.weight", ".k_norm.weight")):
                tensor = tensor[order]
            elif name.endswith(".wqkv.weight"):
                tensor = torch.cat((reorder_head_dims(name, tensor[:qk_rows], order), tensor[qk_rows:]))
            yield name, tensor

    def load_weights(self, named_tensors) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))
