"""Gemma 3n, text (HF Gemma3nForCausalLM; Gemma3nForConditionalGeneration's language model through
multimodal_text.py).

Gemma 4's model (gemma4.py: embeddings times sqrt(H), the per-layer inputs, a rope table per layer type, the final
norm, the tied lm head and the logits' soft-cap, the KV-reusing layers storing nothing) with Gemma 3n's decoder layers
(gemma3n_layers.py) run over K AltUp streams: stream 0 the scaled embeddings, stream k altup_projections[k-1] of them
rescaled to their root mean square; after the last layer each stream k > 0 goes through altup_unembed_projections[k-1],
rescaled to stream 0's root mean square, and the K streams are averaged.  Token ids past vocab_size_per_layer_input
read row 0 of the per-layer embeddings, as HF's do.

Refused: gemma3n_config.py's.  No tensor parallelism, FP8 or GGUF weights, no native one-call decode.
Notation: K streams, T tokens, H hidden.
"""

from typing import Optional

import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma3n_layers import Gemma3nDecoderLayer
from .gemma4 import Gemma4ForCausalLM
from .layers import param
from .packed_linear import linear


def rescaled(x: torch.Tensor, rms: torch.Tensor) -> torch.Tensor:
    """x [T, H] scaled to root mean square `rms` [T, 1] (its own floored at sqrt(1e-5))."""
    return x * rms / torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True).clamp(min=1e-5))


class Gemma3nForCausalLM(Gemma4ForCausalLM):
    """forward(fb) -> final-normed hidden states [T, H]; compute_logits(hidden [N, H]) -> [N, V] float32 (Gemma 4's
    contract)."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        extra, hidden = config.gemma3n.altup_inputs - 1, config.hidden_size
        self.altup_projections = param(extra, hidden, hidden, dtype=dtype, device=device)  # [K-1, H, H]
        self.altup_unembed_projections = param(extra, hidden, hidden, dtype=dtype, device=device)  # [K-1, H, H]

    def make_layer(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device) -> Gemma3nDecoderLayer:
        return Gemma3nDecoderLayer(c, layer_id, attn_backend, dtype, device)

    def run_layers(self, x: torch.Tensor, per_layer: Optional[torch.Tensor], rotaries: dict,
                   fb: ForwardBatch) -> torch.Tensor:
        """The scaled embeddings x [T, H], the per-layer inputs [T, L, P] or None -> the streams' average [T, H]."""
        rms = torch.mean(x ** 2, dim=-1, keepdim=True) ** 0.5  # [T, 1]
        streams = torch.stack([x] + [rescaled(linear(x, w, None, self.gemm_rows), rms)
                                     for w in self.altup_projections])  # [K, T, H]
        for i, layer in enumerate(self.layers):
            streams = layer(streams, None if per_layer is None else per_layer[:, i], rotaries[self.rope_of_layer[i]],
                            fb)  # [K, T, H]
        rms = torch.mean(streams[0] ** 2, dim=-1, keepdim=True) ** 0.5  # [T, 1]
        out = [streams[0]] + [rescaled(linear(s, w, None, self.gemm_rows), rms)
                              for s, w in zip(streams[1:], self.altup_unembed_projections)]
        return torch.stack(out).mean(dim=0)  # [T, H]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for k in range(self.config.gemma3n.altup_inputs - 1):
            t[f"model.altup_projections.{k}.weight"] = self.altup_projections[k]
            t[f"model.altup_unembed_projections.{k}.weight"] = self.altup_unembed_projections[k]
        return t
