"""Gemma 3, text only (HF Gemma3ForCausalLM, Gemma3TextConfig): Gemma 2's layer (gemma2.py) with per-head q/k
(1 + weight) RMSNorms before rope, five sliding-window layers to each global one (layer_types or
sliding_window_pattern), a separate rope base for the sliding layers (rope_local_base_freq, or
rope_parameters["sliding_attention"]) and, by default, no soft-capping.  The config reader (family_config.py)
turns those into ModelConfig fields that gemma2.Gemma2ForCausalLM already reads, so the model is that class.
Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b-it) is this decoder under its multimodal names (multimodal_text.py).
"""

from .gemma2 import Gemma2ForCausalLM


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    """Gemma 3's text decoder: config.qk_norm and config.local_rope_theta are set (see gemma2.py)."""
