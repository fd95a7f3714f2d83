"""The parallel residual block of Phi (phi.py) and Cohere (cohere.py): one input LayerNorm read by attention and
the MLP side by side, x + attn(ln(x)) + mlp(ln(x)), a final LayerNorm, and an lm head with an optional bias and
logit scale (compute_logits).

LayerNorms subtract the mean and run in float32 (HF's CohereLayerNorm; nn.LayerNorm of a float32 model); Phi's have
biases, Cohere's none.  Optional q/k LayerNorms are per head over head_dim, their weights held per head ([Hq+Hkv, D]:
Cohere's differ between heads, Phi's one [D] weight is copied to each head at load).  Attention is Llama's
(qkv_proj, o_proj, their biases, partial rotary through config.rotary_dim).  No tensor parallelism, no GGUF weights
kept quantized and no native one-call decode (its layer is Llama's).
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim, V vocab.
"""

from typing import Optional

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


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """LayerNorm over the last dim in float32, times weight (+ bias), cast back to x.dtype.  weight and bias: [D],
    or [..., D] matching x's trailing dims (per-head norms)."""
    if weight.dim() == 1:
        b = None if bias is None else bias.float()
        return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), b, eps).to(x.dtype)
    y = F.layer_norm(x.float(), (x.shape[-1],), eps=eps) * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)


class ParallelAttention(LlamaAttention):
    """Llama's attention with per-head q/k LayerNorms (config.qk_norm), biased where qk_norm_bias."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device, qk_norm_bias: bool):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        # not named *norm*: loader.init_dummy_weights fills those with ones
        self.qk_bias = (param(c.num_heads + c.num_kv_heads, c.head_dim, dtype=dtype, device=device)
                        if c.qk_norm and qk_norm_bias else None)  # [Hq+Hkv, D]

    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """qk: [T, Hq+Hkv, D] -> [T, Hq+Hkv, D], each head LayerNormed with its own weight (and bias)."""
        return layer_norm(qk, self.qk_norm, self.qk_bias, self.eps)


class ParallelBlockLayer(nn.Module):
    """x + attn(ln(x)) + mlp(ln(x))."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device, mlp: nn.Module, norm_bias: bool):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.input_bias = param(c.hidden_size, dtype=dtype, device=device) if norm_bias else None  # [H]
        self.self_attn = ParallelAttention(c, layer_id, attn_backend, dtype, device, qk_norm_bias=norm_bias)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = layer_norm(x, self.input_layernorm, self.input_bias, self.eps)  # [T, H]
        return x + self.self_attn(h, rotary, fb) + self.mlp(h)  # [T, H]


class ParallelBlockForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with parallel blocks.  Subclasses set NORM_BIAS (every LayerNorm has a bias),
    LM_HEAD_BIAS and make_mlp."""

    NORM_BIAS = False
    LM_HEAD_BIAS = False
    LAYER_KIND = "parallel-block"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, V = config.hidden_size, config.vocab_size
        self.final_bias = param(H, dtype=dtype, device=device) if self.NORM_BIAS else None  # [H]
        self.lm_head_bias = param(V, dtype=dtype, device=device) if self.LM_HEAD_BIAS else None  # [V]

    def make_mlp(self, dtype, device) -> nn.Module:
        """One layer's MLP, [T, H] -> [T, H], with a gemm_rows attribute: Llama's gated one here (Cohere's)."""
        return LlamaMLP(self.config, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return ParallelBlockLayer(self.config, layer_id, attn_backend, dtype, device, self.make_mlp(dtype, device),
                                  self.NORM_BIAS)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.norm, self.final_bias, self.config.rms_norm_eps)  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32, with the lm head's bias and the logit scale where set."""
        logits = linear(hidden, self.lm_head, self.lm_head_bias, self.gemm_rows).float()  # [N, V]
        scale = self.config.logit_scale
        return logits if scale is None else logits * scale  # [N, V]

    def _norm_targets(self, prefix: str, layer) -> dict:
        t = {prefix + "input_layernorm.weight": (layer.input_layernorm, False)}
        if layer.input_bias is not None:
            t[prefix + "input_layernorm.bias"] = (layer.input_bias, False)
        return t
