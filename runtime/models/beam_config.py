"""Beam's fields (HF BeamForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Beam: Qwen3-MoE's attention (per-head q/k norms, attention_bias on all four projections) with a sigmoid output gate
per head dim plus a bias per head; sliding layers (window sliding_window) rotate by rope_parameters
["sliding_attention"], the full layers have no rope (rope_parameters["full_attention"] None) and scale their queries
by (1 + (position + 1) / 2048) ** 0.1.  Four norms per layer (OLMo 3's RMSNorm) and a residual add scaled by depth;
logits soft-capped by final_logit_softcapping.  Experts by mlp_layer_types, routed as moe_config.py reads it.
"""

from typing import Any, Dict

from .ergo_config import sliding_rope_fields


def _beam(arch: str, hf_config) -> Dict[str, Any]:
    bias, cap = bool(getattr(hf_config, "attention_bias", False)), getattr(hf_config, "final_logit_softcapping", None)
    return dict(qk_norm=True, attention_bias=bias, o_proj_bias=bias, final_softcap=float(cap) if cap else None,
                **sliding_rope_fields(arch, hf_config))


BEAM_FIELDS = {"BeamForCausalLM": _beam}
BEAM_MODEL_TYPES = {"beam": "BeamForCausalLM"}
