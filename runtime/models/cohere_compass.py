"""Cohere Compass's text model (HF CohereCompassForCausalLM): Cohere 2's parallel layers (parallel_block.py:
LayerNorms without bias, no q/k norms, attention_bias on all four projections) with rotate-half rope at a base per
layer (config.layer_rope_thetas, read by layer kind; 0: the layer does not rotate), its sliding layers windowed
(config.layer_windows), logits times logit_scale where set (newtext_config.py).
"""

import dataclasses
from typing import Optional

import torch

from .layer_ops import Rotary
from .parallel_block import ParallelBlockForCausalLM
from .rope import rope_cos_sin_cache


class CohereCompassForCausalLM(ParallelBlockForCausalLM):
    """ParallelBlockForCausalLM's contract with a cos/sin cache per distinct rope base."""

    loads_fp8_checkpoints = False

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        self.bases = sorted({b for b in config.layer_rope_thetas if b})   # buffer cos_sin_{k} holds base k's cache
        for k, base in enumerate(self.bases):
            cache = rope_cos_sin_cache(dataclasses.replace(config, rope_theta=base), max_context or config.context_length)
            self.register_buffer(f"cos_sin_{k}", cache.to(device=device, dtype=dtype), persistent=False)  # [C, D]

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        rotaries = {base: Rotary(positions, getattr(self, f"cos_sin_{k}")) for k, base in enumerate(self.bases)}
        unrotated = Rotary(positions, self.cos_sin)   # read by no layer: those without a base do not rotate
        return [rotaries.get(base, unrotated) for base in self.config.layer_rope_thetas]
