"""Muse Glimmer's language model (HF MuseGlimmerTextModel with MuseGlimmerForConditionalGeneration's lm head), served
for text prompts: muse_config.py has its fields.

x + norm(attn(norm(x))), then x + norm(mlp(norm(x))), each norm Gemma's (1 + weight) RMSNorm in float32 (the two
after a sublayer at post_norm_eps); the attention RMS-normalises each q and k head without a weight (the
qk_scale_factor on q is in the score scale, config.attention_multiplier), rotates them outside config.nope_layers,
and gates its output by sigmoid(gate_proj(x)) before o_proj; the sliding windows are the attention backend's.  The
embeddings are RMS-normalised without a weight (the image and video ids embedded as id 0 first, as HF's text path
does), the final norm is a weighted RMSNorm, and the logits are times output_multiplier, then soft-capped.
Checkpoint names are HF's text model's (multimodal_text.py strips model.language_model.); the attention's gate is
self_attn.gate_proj.weight [Hq*D, H].  One rank (OwnLayersForCausalLM).  Notation as in llama.py.
"""

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import gemma_rms_norm, param, soft_cap
from .llama import LlamaAttention, LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear
from .quant_linear import embed


def weightless_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's MuseGlimmerRMSNorm without its weight: x / sqrt(mean(x^2) + eps) over the last dim, in float32."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


class MuseAttention(LlamaAttention):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.gate_proj = param(self.q_size, c.hidden_size, dtype=dtype, device=device)  # [Hq*D, H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(t, hq + 2 * hkv, self.head_dim)
        qk = weightless_rms_norm(qkv[:, :hq + hkv], self.eps)  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        gated = o.reshape(t, self.q_size) * torch.sigmoid(linear(x, self.gate_proj, None, self.gemm_rows))
        return linear(gated, self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]


NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


class MuseDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps, self.post_eps = c.rms_norm_eps, c.muse.post_norm_eps
        for name in NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = MuseAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = LlamaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.self_attn(gemma_rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        x = x + gemma_rms_norm(h, self.post_attention_layernorm, self.post_eps)  # [T, H]
        h = self.mlp(gemma_rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        return x + gemma_rms_norm(h, self.post_feedforward_layernorm, self.post_eps)  # [T, H]


class MuseGlimmerTextForCausalLM(OwnLayersForCausalLM):
    """LlamaForCausalLM's contract with Muse Glimmer's embeddings, layers and logits."""

    LAYER_KIND = "sandwich-norm"
    loads_fp8_checkpoints = False

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.register_buffer("placeholders", torch.tensor(config.placeholders_as_pad[1:], dtype=torch.long,
                                                          device=device), persistent=False)  # [P]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return MuseDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        ids = fb.input_ids
        if self.config.placeholders_as_pad:
            ids = torch.where(torch.isin(ids, self.placeholders), self.config.placeholders_as_pad[0], ids)
        return weightless_rms_norm(embed(ids, self.embed_tokens, self.dtype), self.config.rms_norm_eps)  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return (F.rms_norm(x.float(), (x.shape[-1],), eps=self.config.rms_norm_eps) * self.norm.float()).to(x.dtype)

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> [N, V] float32: times output_multiplier, then soft-capped."""
        logits = super().compute_logits(hidden) * self.config.muse.output_multiplier  # [N, V]
        return soft_cap(logits, self.config.final_softcap)  # [N, V]

    def _linear_weights(self) -> list:
        return super()._linear_weights() + [(layer.self_attn, "gate_proj") for layer in self.layers]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.gate_proj.weight"] = (layer.self_attn.gate_proj, False)
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {prefix + name + ".weight": (getattr(layer, name), False) for name in NORMS}
