"""Apertus 1.5's text model (HF Apertus1p5TextForCausalLM): Apertus (llama_like.py) whose lm head may keep only the
first output_vocab_size rows, the text tokens: served as a model of that vocabulary (newtext_config.py), its
checkpoint's embedding rows past it (multimodal codes, which no text prompt holds) dropped at load, as are the
multimodal checkpoint's vision and audio tokenizers (HF ignores them too).
"""

from typing import Iterable, Tuple

import torch

from .llama_like import ApertusForCausalLM

_TOKENIZERS = ("model.vision_tokenizer.", "model.audio_tokenizer.")


class Apertus1p5TextForCausalLM(ApertusForCausalLM):
    """ApertusForCausalLM's contract over the lm head's vocabulary."""

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        for name, tensor in super().checkpoint_tensors(named_tensors):
            if name == "model.embed_tokens.weight":
                yield name, tensor[:self.config.vocab_size]  # [V_out, H]
            elif not name.startswith(_TOKENIZERS):
                yield name, tensor
