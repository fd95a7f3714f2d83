"""MiniCPM3 (HF MiniCPM3ForCausalLM): DeepSeek-V2's multi-head latent attention (mla.py, rotate-half rope, no
reordering at load) with a dense SwiGLU MLP in every layer, and MiniCPM's three scalings (mla_config.py): embeddings
times scale_emb (own_layers.py), each sublayer's output times residual_multiplier before it joins the residual stream,
and the final hidden states divided by logits_scaling before the lm head (HF's order, not the logits: llama.py's
Granite scaling).  Checkpoint names are DeepSeek's.  One rank; the restrictions of deepseek.py.
"""

import torch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .layer_ops import rms_norm
from .own_layers import OwnLayersForCausalLM


class MiniCPM3DecoderLayer(DeepseekDecoderLayer):
    """x + attn(norm(x)) * r, then x + mlp(norm(x)) * r."""

    def forward(self, x: torch.Tensor, rotary, fb) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        r = self.residual_multiplier
        x = x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb) * r  # [T, H]
        return x + self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps)) * r  # [T, H]


class MiniCPM3ForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM's contract."""

    enable_native_decode = OwnLayersForCausalLM.enable_native_decode   # its reason: no experts here

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        layer = MiniCPM3DecoderLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device),
                                     dtype, device)
        layer.residual_multiplier = self.config.residual_multiplier
        return layer

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] / logits_scaling -> logits [N, V] float32."""
        return super().compute_logits(hidden / self.config.logits_scaling)

    def _scale_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits   # scaled through the hidden states (compute_logits)
