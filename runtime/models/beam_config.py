"""Beam's fields (HF BeamForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Beam: Qwen3-MoE's attention (per-head q/k norms, attention_bias on all four projections) with a sigmoid output gate
per head dim plus a bias per head; sliding layers (window sliding_window) rotate by rope_parameters
["sliding_attention"], the full layers have no rope (rope_parameters["full_attention"] None) and scale their queries
by (1 + (position + 1) / 2048) ** 0.1.  Four norms per layer (OLMo 3's RMSNorm) and a residual add scaled by depth;
logits soft-capped by final_logit_softcapping.  Experts by mlp_layer_types, routed as moe_config.py reads it.
"""

from typing import Any, Dict


def _beam(arch: str, hf_config) -> Dict[str, Any]:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params.get("full_attention") is not None:
        raise ValueError(f"{arch}: rope_parameters for the full_attention layers are not supported (Beam's full "
                         "layers run without rope)")
    sliding = dict(params.get("sliding_attention") or {})
    if (sliding.get("rope_type") or "default") != "default" or sliding.get("partial_rotary_factor") not in (None, 1,
                                                                                                             1.0):
        raise ValueError(f"{arch}: rope_parameters {sliding!r} are not supported; only the default rope on every dim")
    types = list(hf_config.layer_types)
    if set(types) - {"sliding_attention", "full_attention"} or len(types) != int(hf_config.num_hidden_layers):
        raise ValueError(f"{arch}: layer_types {types!r} are not supported")
    window, bias, cap = hf_config.sliding_window, bool(getattr(hf_config, "attention_bias", False)), getattr(
        hf_config, "final_logit_softcapping", None)
    if "sliding_attention" in types and not window:
        raise ValueError(f"{arch}: sliding_attention layers need a sliding_window, got {window!r}")
    return dict(qk_norm=True, attention_bias=bias, o_proj_bias=bias, final_softcap=float(cap) if cap else None,
                rope_params={"rope_type": "default", "rope_theta": float(sliding.get("rope_theta") or 10000.0)},
                nope_layers=tuple(i for i, t in enumerate(types) if t == "full_attention"),
                layer_windows=tuple(int(window) if t == "sliding_attention" else None for t in types))


BEAM_FIELDS = {"BeamForCausalLM": _beam}
BEAM_MODEL_TYPES = {"beam": "BeamForCausalLM"}
