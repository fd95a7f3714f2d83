"""OLMo 3 (HF Olmo3ForCausalLM): OLMo 2's model (olmo2.py) with sliding-window layers (config.layer_windows: three
to each full one by default, or layer_types), enforced by the attention backend, and rope per layer type: the full
layers' parameters (YaRN in the released configs) and the sliding layers' default rope of base
config.local_rope_theta (family_config.py reads both).
"""

import dataclasses
from typing import Optional

import torch

from .layer_ops import Rotary
from .olmo2 import Olmo2ForCausalLM
from .rope import rope_cos_sin_cache


class Olmo3ForCausalLM(Olmo2ForCausalLM):
    """Olmo2ForCausalLM's contract; its sliding layers windowed and rotated by their own rope."""

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        local = dataclasses.replace(config, rope_theta=config.local_rope_theta or config.rope_theta, rope_scaling=None)
        cache = rope_cos_sin_cache(local, max_context or config.context_length)  # [C, D] float32
        self.register_buffer("local_cos_sin", cache.to(device=device, dtype=dtype), persistent=False)  # [C, D]

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        full, local = Rotary(positions, self.cos_sin), Rotary(positions, self.local_cos_sin)
        return [local if window else full for window in self.config.layer_windows or [None] * len(self.layers)]
