"""Gemma 3, text only (HF Gemma3ForCausalLM, Gemma3TextConfig): Gemma 2's layer (gemma2.py) with per-head q/k
(1 + weight) RMSNorms before rope, five sliding-window layers to each global one (layer_types or
sliding_window_pattern), a separate rope base for the sliding layers (rope_local_base_freq, or
rope_parameters["sliding_attention"]) and, by default, no soft-capping.  The config reader (family_config.py)
turns those into ModelConfig fields that gemma2.Gemma2ForCausalLM already reads, so the model is that class.
Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b-it) is the same decoder under its multimodal weight names.
"""

import logging
from typing import Iterable, Tuple

import torch

from .gemma2 import Gemma2ForCausalLM

logger = logging.getLogger(__name__)


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    """Gemma 3's text decoder: config.qk_norm and config.local_rope_theta are set (see gemma2.py)."""


class Gemma3ForConditionalGeneration(Gemma3ForCausalLM):
    """HF Gemma3ForConditionalGeneration served for text prompts: its language model, loaded from the checkpoint's
    multimodal names; the vision tower and projector are skipped (images are not served)."""

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(_language_model_weights(named_tensors))


# transformers 5's module names, then the released checkpoints' (which its save_pretrained writes too)
_TEXT_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."),
                  ("language_model.lm_head.", "lm_head."))
_VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector.")


def _language_model_weights(named_tensors):
    skipped = 0
    for name, tensor in named_tensors:
        if name.startswith(_VISION_PREFIXES):
            skipped += 1
            continue
        old = next((old for old in _TEXT_PREFIXES if name.startswith(old[0])), None)
        yield (old[1] + name[len(old[0]):] if old else name), tensor
    logger.info("Gemma3ForConditionalGeneration: %d vision tower and projector weights skipped; images are not "
                "served, text prompts only", skipped)
