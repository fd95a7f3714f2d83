"""The Hugging Face config fields of GraniteSWA and GraniteMoeSWA (Granite "swash"), as ModelConfig fields
(family_config.py's contract: each reader returns the keyword arguments ModelConfig.from_hf adds or overrides).  No
torch here.

Both are Granite (its four multipliers) with sliding-window layers (layer_types; by default every fourth layer from 0
full, the others sliding), a learned attention sink per query head (the model class's: granite_swa.py) and a rope base
per layer (layer_rope_theta, 0: no rotary embedding on that layer).  GraniteMoeSWA's experts and optional shared MLP
are GraniteMoeShared's (moe_config.py).
"""

from typing import Any, Dict

from .llama_like_config import _granite

GRANITE_SWA_MODEL_TYPES = {"granite_swa": "GraniteSWAForCausalLM", "granitemoe_swa": "GraniteMoeSWAForCausalLM"}
LAYER_TYPES = ("sliding_attention", "full_attention")


def _windows(arch: str, hf_config) -> tuple:
    """Per layer: the sliding window or None (full attention), HF's default pattern where layer_types is unset."""
    n, window = int(hf_config.num_hidden_layers), getattr(hf_config, "sliding_window", None)
    types = list(getattr(hf_config, "layer_types", None)
                 or ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(n)])
    if len(types) != n or set(types) - set(LAYER_TYPES):
        raise ValueError(f"{arch}: unsupported layer_types {types!r}; one of {LAYER_TYPES} per layer")
    return tuple(int(window) if t == "sliding_attention" and window else None for t in types)


def _layer_rope(arch: str, hf_config) -> Dict[str, Any]:
    """layer_rope_theta: each layer's rope base, 0 for none (nope_layers); unset: the global base everywhere."""
    thetas = list(getattr(hf_config, "layer_rope_theta", None) or [])
    if not thetas:
        return {}
    if len(thetas) != int(hf_config.num_hidden_layers) or any(t < 0 for t in thetas):
        raise ValueError(f"{arch}: layer_rope_theta {thetas!r} needs one base >= 0 per layer")
    return dict(layer_rope_thetas=tuple(float(t) for t in thetas),
                nope_layers=tuple(i for i, t in enumerate(thetas) if not t))


def _granite_swa(arch: str, hf_config) -> Dict[str, Any]:
    """Granite's multipliers, attention_bias on all four projections, mlp_bias (dense) on the gated MLP."""
    bias = bool(getattr(hf_config, "attention_bias", False))
    fields = dict(_granite(hf_config), layer_windows=_windows(arch, hf_config), attention_bias=bias,
                  o_proj_bias=bias, **_layer_rope(arch, hf_config))
    if arch == "GraniteSWAForCausalLM":
        fields["mlp_bias"] = bool(getattr(hf_config, "mlp_bias", False))
    return fields


GRANITE_SWA_FIELDS = {"GraniteSWAForCausalLM": _granite_swa, "GraniteMoeSWAForCausalLM": _granite_swa}
