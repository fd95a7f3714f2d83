"""OLMo 2 (HF Olmo2ForCausalLM): the Llama family's weights (llama.py) in a post-norm layer.

Differences from Llama: no pre-norms; post_attention_layernorm normalises the attention output and
post_feedforward_layernorm the MLP output before each joins the residual stream; q_norm and k_norm are RMSNorms
over the whole q and k projections (widths Hq*D and Hkv*D, not per head), applied before rope; every RMSNorm
multiplies by its weight in float32 before casting back (Llama casts first).  No tensor parallelism (the whole-width
q/k norms would need every rank's heads) and no native one-call decode (its layer is Llama's).
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""


import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear


def olmo2_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Olmo2RMSNorm: normalise over the last dim and multiply by weight, both in float32, then cast to x.dtype."""
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * weight.float()).to(x.dtype)


class Olmo2Attention(LlamaAttention):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.q_norm = param(self.q_size, dtype=dtype, device=device)  # [Hq*D]
        self.k_norm = param(self.kv_size, dtype=dtype, device=device)  # [Hkv*D]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, D = x.shape[0], self.head_dim
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows)  # [T, (Hq+2Hkv)*D]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=1)
        q = olmo2_rms_norm(q, self.q_norm, self.eps).view(T, self.num_heads, D)  # [T, Hq, D]
        k = olmo2_rms_norm(k, self.k_norm, self.eps).view(T, self.num_kv_heads, D)  # [T, Hkv, D]
        if self.rope:   # OLMo Hybrid's NoPE: none
            q, k = rotary.apply_(q), rotary.apply_(k)
        o = self.attn_backend.forward(q, k, v.view(T, self.num_kv_heads, D), self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(T, self.q_size), self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]


class Olmo2DecoderLayer(nn.Module):
    """x + norm(attn(x)), then x + norm(mlp(x)): OLMo 2's post-norm residual block (EXAONE 4's with its own attention
    and norm: llama_like.py)."""

    attention_class = Olmo2Attention
    rms_norm = staticmethod(olmo2_rms_norm)

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_feedforward_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attn = self.attention_class(c, layer_id, attn_backend, dtype, device)
        self.mlp = self.make_mlp(c, dtype, device)

    def make_mlp(self, c: ModelConfig, dtype, device) -> nn.Module:
        """The layer's MLP, [T, H] -> [T, H] (assembled.py: FlexOlmo's experts)."""
        return LlamaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.rms_norm(self.self_attn(x, rotary, fb), self.post_attention_layernorm, self.eps)  # [T, H]
        return x + self.rms_norm(self.mlp(x), self.post_feedforward_layernorm, self.eps)  # [T, H]


class Olmo2ForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with OLMo 2's post-norm layers."""

    LAYER_KIND = "post-norm"
    TP_REASON = " (its q/k norms span every head)"
    layer_class = Olmo2DecoderLayer

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return self.layer_class(self.config, layer_id, attn_backend, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_class.rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _norm_targets(self, prefix: str, layer) -> dict:
        attn = layer.self_attn
        return {**post_norm_targets(prefix, layer), prefix + "self_attn.q_norm.weight": (attn.q_norm, False),
                prefix + "self_attn.k_norm.weight": (attn.k_norm, False)}


def post_norm_targets(prefix: str, layer: Olmo2DecoderLayer) -> dict:
    """HF name -> (destination, broadcast allowed) of a post-norm layer's two residual-stream norms."""
    return {prefix + "post_attention_layernorm.weight": (layer.post_attention_layernorm, False),
            prefix + "post_feedforward_layernorm.weight": (layer.post_feedforward_layernorm, False)}
