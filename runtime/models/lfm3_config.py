"""LFM3's fields (no torch): Liquid AI's LFM3 (HF Lfm3ForCausalLM) is LFM2's hybrid (lfm2_config.py) with three layer
kinds ("conv", "full_attention", "sliding_attention": a window of sliding_window keys), rope parameters per attention
kind, an RMSNorm on each sublayer's output before it joins the residual (use_sandwich_norm), a sigmoid gate per query
head on the attention output (use_attention_gate, g_proj), attention_bias on q/k/v/o and a plain SwiGLU of
intermediate_size (no auto-adjusted width).

Rope per attention kind: "default" (every dim of the head rotating) or "proportional": of the head's D/2 rotate-half
pairs the first partial_rotary_factor * D/2 rotate at frequencies base ** (-2i / D), the others not at all, every
frequency divided by factor.  The default is that rule with factor 1 and every pair rotating.
"""

from typing import Any, Dict

LFM3_LAYER_KINDS = ("conv", "full_attention", "sliding_attention")
_ROPE_TYPES = ("default", "proportional")


def lfm3_fields(hf_config) -> Dict[str, Any]:
    """ModelConfig.from_hf's fields that LFM3 names its own way: the width, norm_eps, q/k norms, biases, windows (per
    model layer; the model numbers them among the attention layers); its rope is the model's (layer_ropes)."""
    arch, n = "Lfm3ForCausalLM", int(hf_config.num_hidden_layers)
    types = layer_kinds(hf_config)
    window = getattr(hf_config, "sliding_window", None)
    bias = bool(getattr(hf_config, "attention_bias", False))
    if "sliding_attention" in types and not window:
        raise ValueError(f"{arch}: sliding_attention layers need a sliding_window, got {window!r}")
    if len(types) != n:
        raise ValueError(f"{arch}: layer_types must name one of {LFM3_LAYER_KINDS} for each of the {n} layers")
    return dict(intermediate_size=int(hf_config.intermediate_size), rms_norm_eps=float(hf_config.norm_eps),
                qk_norm=True, attention_bias=bias, o_proj_bias=bias,
                layer_windows=tuple(int(window) if t == "sliding_attention" else None for t in types),
                rope_params={"rope_type": "default", "rope_theta": 10000.0})   # unread: layer_ropes


def layer_kinds(hf_config) -> list:
    types = list(getattr(hf_config, "layer_types", None) or ())
    if set(types) - set(LFM3_LAYER_KINDS):
        raise ValueError(f"Lfm3ForCausalLM: unsupported layer_types {types!r}; supported: {LFM3_LAYER_KINDS}")
    return types


def lfm3_short_conv(hf_config) -> Dict[str, Any]:
    """ShortConv's LFM3 fields: sandwich_norms, attention_gate and layer_ropes (per layer: (base, rotating fraction of
    the head's pairs, frequency divisor), None for a convolution)."""
    ropes = {kind: _rope(hf_config, kind) for kind in LFM3_LAYER_KINDS[1:]}
    return dict(sandwich_norms=bool(getattr(hf_config, "use_sandwich_norm", True)),
                attention_gate=bool(getattr(hf_config, "use_attention_gate", True)),
                layer_ropes=tuple(ropes.get(t) for t in layer_kinds(hf_config)))


def _rope(hf_config, kind: str):
    """(base, fraction, factor) of one attention kind's rope_parameters; ValueError for a rope we do not run."""
    params = dict((getattr(hf_config, "rope_parameters", None) or {}).get(kind) or {})
    rope_type = params.get("rope_type", "default")
    if rope_type not in _ROPE_TYPES:
        raise ValueError(f"Lfm3ForCausalLM: rope_parameters[{kind!r}] rope_type {rope_type!r} is not supported; "
                         f"supported: {_ROPE_TYPES}")
    fraction, factor = float(params.get("partial_rotary_factor", 1.0)), float(params.get("factor", 1.0))
    if rope_type == "default" and fraction != 1.0:
        raise ValueError(f"Lfm3ForCausalLM: rope_parameters[{kind!r}]: partial_rotary_factor {fraction} with the "
                         "default rope is not supported")
    if not 0.0 <= fraction <= 1.0 or factor <= 0:
        raise ValueError(f"Lfm3ForCausalLM: rope_parameters[{kind!r}]: partial_rotary_factor {fraction} must be in "
                         f"[0, 1] and factor {factor} above 0")
    return float(params.get("rope_theta", 10000.0)), fraction, 1.0 if rope_type == "default" else factor
