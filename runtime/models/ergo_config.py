"""Ergo's fields (HF ErgoForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Ergo: a fused q/k/v projection with per-head q/k RMSNorms; sliding layers (window sliding_window) rotate interleaved
pairs (Cohere's rope) at rope_parameters["sliding_attention"], the full layers (every global_attention_every_n_layers-th
by default, layer_types) have no rope and scale their scores by global_attention_scale where set.  Each sublayer sits
between an input and an output RMSNorm and joins the residual stream through a learned gate per hidden dim.  MLPs are
relu^2 without a gate: the dense layers' of first_dense_intermediate_size, the experts' (each followed by its own
RMSNorm) and a shared expert's (followed by an RMSNorm); routing as moe_config.py reads it (DeepSeek-V3's sigmoid and
correction bias, no groups, always renormalised, times moe_routed_scaling_factor).  Head dim hidden_size / heads.
"""

from typing import Any, Dict


def _ergo(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "tie_word_embeddings", False):
        raise ValueError(f"{arch}: tie_word_embeddings=True is not supported (HF's Ergo never ties its lm head)")
    scale = getattr(hf_config, "global_attention_scale", None)
    return dict(head_dim=int(hf_config.hidden_size) // int(hf_config.num_attention_heads), qk_norm=True,
                intermediate_size=int(hf_config.first_dense_intermediate_size), hidden_act="relu2",
                global_attention_scale=None if scale is None else float(scale), **sliding_rope_fields(arch, hf_config))


def sliding_rope_fields(arch: str, hf_config) -> Dict[str, Any]:
    """Ergo's and Beam's layers: the sliding ones rotate every dim by rope_parameters["sliding_attention"] (the default
    rope) within sliding_window, the full ones have none (rope_parameters["full_attention"] None)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if "rope_type" in params:   # one rope for the sliding layers (ErgoConfig's own conversion)
        params = {"sliding_attention": params, "full_attention": None}
    if params.get("full_attention") is not None:
        raise ValueError(f"{arch}: rope_parameters for the full_attention layers are not supported (its full layers "
                         "run without rope)")
    sliding = dict(params.get("sliding_attention") or {})
    if (sliding.get("rope_type") or "default") != "default" or sliding.get("partial_rotary_factor") not in (None, 1,
                                                                                                             1.0):
        raise ValueError(f"{arch}: rope_parameters {sliding!r} are not supported; only the default rope on every dim")
    types, window = list(hf_config.layer_types), hf_config.sliding_window
    if set(types) - {"sliding_attention", "full_attention"} or len(types) != int(hf_config.num_hidden_layers):
        raise ValueError(f"{arch}: layer_types {types!r} are not supported")
    if "sliding_attention" in types and not window:
        raise ValueError(f"{arch}: sliding_attention layers need a sliding_window, got {window!r}")
    return dict(rope_params={"rope_type": "default", "rope_theta": float(sliding.get("rope_theta") or 10000.0)},
                nope_layers=tuple(i for i, t in enumerate(types) if t == "full_attention"),
                layer_windows=tuple(int(window) if t == "sliding_attention" else None for t in types))


ERGO_FIELDS = {"ErgoForCausalLM": _ergo}
ERGO_MODEL_TYPES = {"ergo": "ErgoForCausalLM"}
