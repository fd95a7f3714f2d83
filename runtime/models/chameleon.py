"""Chameleon (HF ChameleonForConditionalGeneration) served for text prompts: Llama's model with per-head q/k
LayerNorms (chameleon_config.py), its VQ image tokenizer (model.vqmodel.*) dropped at load.

The q/k norms keep LlamaAttention's qk_norm weight [Hq+Hkv, D] (q's heads, then k's: q_norm.weight [Hq, D] and
k_norm.weight [Hkv, D]) with a bias of the same shape; each normalises over head_dim with epsilon 1e-5.  With
swin_norm the layer normalises each sublayer's output before it joins the residual (input_layernorm after attention,
post_attention_layernorm after the MLP) and has no pre-norms.  The image tokens' logits are set to the float32
minimum, as HF sets them to its dtype's: they never win a greedy or sampled step.  One rank, no native one-call decode
(Llama's q/k norm is an RMSNorm), no FP8.
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim, V vocab.
"""

from typing import Optional

import torch

from .layer_ops import rms_norm
from .layers import param
from .llama import LlamaAttention, LlamaDecoderLayer
from .llama_like import OneRankLlama
from .parallel_block import layer_norm

QK_NORM_EPS = 1e-5   # HF's ChameleonLayerNorm's, whatever the config says


class ChameleonAttention(LlamaAttention):
    def __init__(self, c, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.qk_bias = param(c.num_heads + c.num_kv_heads, c.head_dim, dtype=dtype, device=device)  # [Hq+Hkv, D]

    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """qk [T, Hq+Hkv, D] -> [T, Hq+Hkv, D]: each head's LayerNorm over D, its own weight and bias."""
        return layer_norm(qk, self.qk_norm, self.qk_bias, QK_NORM_EPS)


class ChameleonDecoderLayer(LlamaDecoderLayer):
    attention_class = ChameleonAttention

    def __init__(self, c, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.swin_norm = c.chameleon.swin_norm

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor], rotary, fb):
        """LlamaDecoderLayer's contract; with swin_norm: x + norm(attn(x)), then x + norm(mlp(x))."""
        if not self.swin_norm:
            return super().forward(x, residual, rotary, fb)
        stream = x if residual is None else x + residual  # [T, H]
        stream = stream + rms_norm(self.self_attn(stream, rotary, fb), self.input_layernorm, self.eps)  # [T, H]
        return rms_norm(self.mlp(stream), self.post_attention_layernorm, self.eps), stream


class ChameleonForCausalLM(OneRankLlama):
    """OneRankLlama's contract with Chameleon's layers and image-token logits."""

    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        return ChameleonDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s q/k LayerNorms are not in the native one-call decode"

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> [N, V] float32, the image tokens' at the minimum."""
        logits = super().compute_logits(hidden)  # [N, V]
        image = self.config.chameleon.image_tokens
        if image:
            logits[:, list(image)] = torch.finfo(logits.dtype).min
        return logits

    def _weight_targets(self) -> dict:
        t, hq = super()._weight_targets(), self.config.num_heads
        for i, layer in enumerate(self.layers):
            p, bias = f"model.layers.{i}.self_attn.", layer.self_attn.qk_bias
            t[p + "q_norm.bias"] = (bias[:hq], False)   # [Hq, D]
            t[p + "k_norm.bias"] = (bias[hq:], False)   # [Hkv, D]
        return t

    def checkpoint_tensors(self, named_tensors):
        return ((name, t) for name, t in super().checkpoint_tensors(named_tensors)
                if not name.startswith("model.vqmodel."))

    def load_weights(self, named_tensors) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))
