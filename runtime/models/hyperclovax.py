"""HyperCLOVA X (HF HyperCLOVAXForCausalLM): Granite's model (llama.py with the config's embedding, residual and
attention multipliers; logits multiplied by logits_scaling, held inverted in config.logits_scaling) whose layers, where
config.sublayer_post_norms (use_post_norm), RMSNorm each sublayer's output (post_norm1, post_norm2) before the residual
multiplier and the residual add ("Peri-Layer Normalization").  No tensor parallelism, GGUF weights kept quantized or FP8
checkpoints (llama_like.OneRankLlama); no native one-call decode with the post-norms.
Notation as in llama.py: T tokens, H hidden.
"""

from typing import Optional

import torch
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, add_rms_norm, rms_norm
from .layers import param
from .llama import LlamaDecoderLayer
from .llama_like import OneRankLlama


class HyperCLOVAXDecoderLayer(LlamaDecoderLayer):
    """Llama's pre-norm block with an RMSNorm on the attention's and the MLP's output."""

    def __init__(self, config, layer_id: int, attn_backend, dtype, device):
        super().__init__(config, layer_id, attn_backend, dtype, device)
        self.post_norm1 = param(config.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_norm2 = param(config.hidden_size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor], rotary: Rotary, fb: ForwardBatch):
        """LlamaDecoderLayer's contract: (output not yet added [T, H], residual stream [T, H] updated in place)."""
        if residual is None:
            residual, h = x, rms_norm(x, self.input_layernorm, self.eps)
        else:
            h = add_rms_norm(x, residual, self.input_layernorm, self.eps)  # [T, H]
        x = self._to_residual(self.post_norm(self.self_attn(h, rotary, fb), self.post_norm1))  # [T, H]
        h = add_rms_norm(x, residual, self.post_attention_layernorm, self.eps)  # [T, H]
        return self._to_residual(self.post_norm(self.mlp(h), self.post_norm2)), residual

    def post_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """A sublayer's output x [T, H] RMSNormed (HF LlamaRMSNorm) by `weight` [H]."""
        return rms_norm(x, weight, self.eps)  # [T, H]


class HyperCLOVAXForCausalLM(OneRankLlama):
    """OneRankLlama with HyperCLOVAXDecoderLayer where config.sublayer_post_norms, else Llama's (Granite's) layer."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        if not self.config.sublayer_post_norms:
            return super().make_layer(layer_id, attn_backend, dtype, device)
        return HyperCLOVAXDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def enable_native_decode(self) -> Optional[str]:
        if not self.config.sublayer_post_norms:
            return super().enable_native_decode()
        self.native_decode = None
        return f"{self.config.architecture}'s post-norm layers are not in the native one-call decode"

    def _norm_targets(self, prefix: str, layer) -> dict:
        t = super()._norm_targets(prefix, layer)
        if isinstance(layer, HyperCLOVAXDecoderLayer):
            t.update({prefix + "post_norm1.weight": (layer.post_norm1, False),
                      prefix + "post_norm2.weight": (layer.post_norm2, False)})
        return t
