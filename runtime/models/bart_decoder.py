"""The BART-like decoders served as causal LMs (HF BartForCausalLM, MBart, PLBart, Mvp, Blenderbot, BlenderbotSmall,
Pegasus, Marian, TrOCR, BigBirdPegasus ...ForCausalLM; fields: decoder_config.py) on the GPT layers (gpt_layers.py):
q/k/v/out projections and fc1 -> act -> fc2 with biases, OPT's post-norm layers (opt.py) or pre-norm ones with a final
norm, learned positions (the row of position p at p + offset) or Pegasus's or fairseq's sinusoids, a LayerNorm on
the embeddings (layernorm_embedding) where the family has one, the lm head tied to the embeddings.  Without encoder
states HF skips each layer's encoder_attn: its weights are read and dropped.  Notation as in llama.py: T tokens,
H hidden, P positions.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gpt_layers import GptForCausalLM, GptLayer
from .layernorm_model import LayerNorm
from .opt import PostNormGptLayer
from .xglm import XGLMForCausalLM, sinusoidal_positions

POSITIONS = "model.embed_positions.weight"


def pegasus_positions(rows: int, dim: int) -> torch.Tensor:
    """[rows, dim] float32: HF Pegasus's (and Marian's) fixed table, computed in float64 as its numpy one: the sines of
    the even angle columns, then the cosines of the odd (columns 2j and 2j + 1 at 10000 ** (-2j / dim))."""
    cols = torch.arange(dim, dtype=torch.float64)  # [dim]
    angles = torch.arange(rows, dtype=torch.float64).unsqueeze(1) / torch.pow(10000.0, 2 * (cols // 2) / dim)
    return torch.cat([torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])], dim=1).float()  # [rows, dim]


class BartDecoderForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with the BART-like names, the embedding norm and the family's layer order."""

    PREFIX = "model.decoder."
    NAMES = ((r"embed_positions\.", "model.embed_positions."), (r"layernorm_embedding\.", "model.embed_norm."),
             (r"output_projection\.", "lm_head."),   # TrOCR's lm head
             *XGLMForCausalLM.NAMES)   # embed_tokens, layer_norm (the final norm) and the layers' names
    SKIPPED = r"layers\.\d+\.encoder_attn(_layer_norm)?\..*"   # cross-attention: skipped without encoder states

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        layout = config.decoder
        self.embed_norm = (LayerNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
                           if layout.embed_norm else None)
        if layout.sinusoidal:
            with torch.no_grad():
                self.embed_positions.copy_(self.position_table())  # [P, H]

    def position_table(self) -> torch.Tensor:
        """The fixed [P, H] table: Pegasus's sinusoids, or fairseq's (xglm.py) with the row pad_row zero (TrOCR's)."""
        rows, dim = self.embed_positions.shape
        if self.config.decoder.sinusoidal == "pegasus":
            return pegasus_positions(rows, dim)
        table = sinusoidal_positions(rows, dim)  # [P, H]
        table[self.config.decoder.pad_row] = 0
        return table

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer_class = PostNormGptLayer if self.config.gpt.post_norm else GptLayer
        return layer_class(self.config, layer_id, attn_backend, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        """Scaled token embeddings plus positions [T, H], through the embedding norm before or after the add."""
        tokens = super(GptForCausalLM, self).embed_inputs(fb)  # [T, H], times the embedding scale
        where = self.config.decoder.embed_norm
        if where == "before_positions":
            tokens = self.norm_embeddings(tokens)
        x = tokens + self.position_embeddings(fb)  # [T, H]
        return self.norm_embeddings(x) if where == "after_positions" else x

    def position_embeddings(self, fb: ForwardBatch) -> torch.Tensor:
        """Each token's position embedding [T, H]; where pad_row is set (RoBERTa's, TrOCR's sinusoids) a pad token reads
        the row pad_row (HF's positions count past it; a prompt holding it is served with its positions uncounted)."""
        rows = super().position_embeddings(fb)  # [T, H]
        pad = self.config.decoder.pad_row
        return rows if pad is None else torch.where((fb.input_ids == pad).unsqueeze(1), self.embed_positions[pad], rows)

    def norm_embeddings(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed_norm(x)  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return super().final_norm(x) if self.config.decoder.final_norm else x  # [T, H]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        if self.embed_norm is not None:
            t.update(self.embed_norm.targets("model.embed_norm"))
        if not self.config.decoder.final_norm:
            del t["model.norm.weight"], t["model.norm.bias"]
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream in our names; a sinusoidal table the checkpoint lacks is computed (HF's init)."""
        seen = False
        for name, tensor in super().checkpoint_tensors(named_tensors):
            seen = seen or name == POSITIONS
            yield name, tensor
        if self.config.decoder.sinusoidal and not seen:
            yield POSITIONS, self.position_table()


class BigBirdPegasusDecoderForCausalLM(BartDecoderForCausalLM):
    """Pre-norm layers whose final norm is named layernorm_embedding."""

    NAMES = ((r"layernorm_embedding\.", "model.norm."), *BartDecoderForCausalLM.NAMES)

