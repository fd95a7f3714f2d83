"""Gemma 3n, text (HF Gemma3nForCausalLM; Gemma3nForConditionalGeneration's language model through
multimodal_text.py).

Gemma 4's model (gemma4.py: embeddings times sqrt(H), the per-layer inputs, a rope table per layer type, the final
norm, the tied lm head and the logits' soft-cap, the KV-reusing layers storing nothing) with Gemma 3n's decoder layers
(gemma3n_layers.py) run over K AltUp streams: stream 0 the scaled embeddings, stream k altup_projections[k-1] of them
rescaled to their root mean square; after the last layer each stream k > 0 goes through altup_unembed_projections[k-1],
rescaled to stream 0's root mean square, and the K streams are averaged.  Token ids past vocab_size_per_layer_input
read row 0 of the per-layer embeddings, as HF's do.  A multimodal checkpoint's token ids from its vision embedder's
vocab_offset on (image and audio tokens past the text vocabulary's own) are embedded by its embed_vision and
embed_audio (gemma3n_config.HardTokens), unscaled, as HF does.

Refused: gemma3n_config.py's.  No tensor parallelism, FP8 or GGUF weights, no native one-call decode.
Notation: K streams, T tokens, H hidden.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma3n_config import HardTokens
from .gemma3n_layers import Gemma3nDecoderLayer
from .gemma4 import Gemma4ForCausalLM
from .gemma4_layers import rms_norm
from .layers import param
from .packed_linear import linear


class HardTokenEmbedder(nn.Module):
    """Gemma3nForConditionalGeneration's embed_vision or embed_audio for the ids it owns (gemma3n_config.HardTokens;
    HF Gemma3nMultimodalEmbedder on input_ids)."""

    def __init__(self, e: HardTokens, hidden: int, dtype, device):
        super().__init__()
        self.name, self.offset, self.end, self.eps = e.name, e.offset, e.end, e.eps
        self.embedding = param(e.rows, e.width, dtype=dtype, device=device)  # [rows, width]
        self.hard_embedding_norm = param(e.width, dtype=dtype, device=device)  # [width]
        self.embedding_projection = param(hidden, e.width, dtype=dtype, device=device)  # [H, width]

    def forward(self, input_ids: torch.Tensor, x: torch.Tensor, gemm_rows: Optional[int] = None) -> torch.Tensor:
        """input_ids [T], their text embeddings x [T, H] -> x with the rows of this embedder's ids replaced."""
        rows = (input_ids - self.offset).clamp(0, self.embedding.shape[0] - 1)  # [T]
        hard = rms_norm(F.embedding(rows, self.embedding), self.hard_embedding_norm, self.eps)  # [T, width]
        hard = rms_norm(linear(hard, self.embedding_projection, None, gemm_rows), None, self.eps)  # [T, H]
        owned = (input_ids >= self.offset) & (input_ids < self.end)  # [T]
        return torch.where(owned.unsqueeze(-1), hard.to(x.dtype), x)

    def checkpoint_targets(self) -> dict:
        prefix = f"model.{self.name}."
        return {prefix + name + ".weight": getattr(self, name)
                for name in ("embedding", "hard_embedding_norm", "embedding_projection")}


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
        self.hard_token_embedders = nn.ModuleList(HardTokenEmbedder(e, hidden, dtype, device)
                                                  for e in config.gemma3n.hard_tokens)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] -> the scaled embeddings [T, H], the multimodal checkpoint's hard tokens its embedders'."""
        x = super().embed(input_ids)  # [T, H]
        for embedder in self.hard_token_embedders:
            x = embedder(input_ids, x, self.gemm_rows)
        return x

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
        for embedder in self.hard_token_embedders:
            t.update(embedder.checkpoint_targets())
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Gemma4ForCausalLM.load_weights, less the embedders' soft_embedding_norm (for the vision and audio towers'
        outputs, which text prompts never have)."""
        super().load_weights((n, w) for n, w in named_tensors if not n.endswith(".soft_embedding_norm.weight"))
