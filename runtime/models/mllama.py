"""Llama 3.2 Vision's text model (HF MllamaForCausalLM), for text prompts: Llama's layers, its cross-attention
layers skipped as HF skips them with no image (mllama_config.py).  The checkpoint's self-attention layers are
renumbered to ours (config.self_attention_layers), the cross-attention layers' weights and the embedding's rows past
the vocabulary (image tokens) dropped at load.
"""

import re
from typing import Iterable, Tuple

import torch

from .llama_like import OneRankLlama

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


class MllamaForCausalLM(OneRankLlama):
    """LlamaForCausalLM over the checkpoint's self-attention layers."""

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        return self._self_attention_weights(named_tensors)

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        # not self.checkpoint_tensors: a multimodal checkpoint's (multimodal_text.py) renames its names once, before
        super().load_weights(self._self_attention_weights(named_tensors))

    def _self_attention_weights(self, named_tensors):
        ours = {theirs: i for i, theirs in enumerate(self.config.self_attention_layers)}
        for name, tensor in named_tensors:
            layer = _LAYER.match(name)
            if layer is not None:
                if int(layer[1]) not in ours:   # a cross-attention layer
                    continue
                name = f"model.layers.{ours[int(layer[1])]}.{name[layer.end():]}"
            elif name == "model.embed_tokens.weight":
                tensor = tensor[:self.config.vocab_size]  # [V, H]
            yield name, tensor
