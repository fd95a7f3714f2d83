"""StableLM (HF StableLmForCausalLM: StableLM 2, StableLM-3B): pre-norm layers of LayerNorms with a bias
(layernorm_model.py), the Llama gated SiLU MLP, partial rotary embeddings (config.rotary_dim: the first
partial_rotary_factor of each head's dims rotate), q/k/v bias (use_qkv_bias), no o_proj bias, per-head q/k
LayerNorms without bias, each head its own weight (qk_layernorm), and the parallel residual (use_parallel_residual:
x + attn(norm(x)) + mlp(norm(x)), no post-attention norm).
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layernorm_model import LayerNorm, LayerNormForCausalLM
from .llama import LlamaAttention, LlamaMLP
from .packed_linear import linear


def per_head_layer_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF StableLmLayerNormPerHead: x [T, heads, D] normalised over D, times each head's weight [heads, D] (no
    bias), in float32 then cast to x.dtype."""
    return (F.layer_norm(x.float(), (x.shape[-1],), eps=eps) * weight.float()).to(x.dtype)


class StableLmAttention(LlamaAttention):
    """Llama's attention; its qk_norm [Hq+Hkv, D] holds the per-head LayerNorm weights of q (rows [:Hq]) and k."""

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(T, hq + 2 * hkv, self.head_dim)
        qk = qkv[:, :hq + hkv]  # [T, Hq+Hkv, D]
        if self.qk_norm is not None:
            qk = per_head_layer_norm(qk, self.qk_norm, self.eps)  # [T, Hq+Hkv, D]
        qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(T, self.q_size), self.o_proj, None, self.gemm_rows)  # [T, H]


class StableLmDecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); or, with the parallel residual, x + attn(norm(x)) + mlp(norm(x))."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.input_layernorm = LayerNorm(c.hidden_size, c.rms_norm_eps, dtype, device)
        self.post_attention_layernorm = (None if c.parallel_residual
                                         else LayerNorm(c.hidden_size, c.rms_norm_eps, dtype, device))
        self.self_attn = StableLmAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = LlamaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.input_layernorm(x)  # [T, H]
        x = x + self.self_attn(h, rotary, fb)  # [T, H]
        if self.post_attention_layernorm is None:
            return x + self.mlp(h)  # [T, H]
        return x + self.mlp(self.post_attention_layernorm(x))  # [T, H]


class StableLmForCausalLM(LayerNormForCausalLM):
    """LayerNormForCausalLM's contract with StableLM's layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return StableLmDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def _weight_targets(self) -> dict:
        """Llama's names, with the q/k norms as StableLmLayerNormPerHead's: one LayerNorm weight per head."""
        targets = {name: t for name, t in super()._weight_targets().items()
                   if not name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight"))}
        c = self.config
        for i, layer in enumerate(self.layers):
            weights = layer.self_attn.qk_norm  # [Hq+Hkv, D]
            if weights is None:
                continue
            p = f"model.layers.{i}.self_attn."
            targets.update({f"{p}q_layernorm.norms.{h}.weight": (weights[h], False) for h in range(c.num_heads)})
            targets.update({f"{p}k_layernorm.norms.{h}.weight": (weights[c.num_heads + h], False)
                            for h in range(c.num_kv_heads)})
        return targets
