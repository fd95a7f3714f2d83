"""The Hugging Face config fields of the newer mixture-of-experts families HF assembles from DeepSeek, Qwen3-MoE and
GLM-4-MoE pieces, as ModelConfig fields (family_config.py's contract: each reader returns the keyword arguments
ModelConfig.from_hf adds or overrides).  Their experts are read by moe_config.py.  No torch here.

MiniCPM 5 MoE (MiniCPM5MoeForCausalLM): Llama's attention whose q projection also gives each head a sigmoid output
gate (use_gated_attention, which HF requires), DeepSeek-V3's routing, dense layers by mlp_layer_types.
Kolibri 1 (Kolibri1ForCausalLM): EXAONE 4's attention (per-head q/k norms; the full-attention layers of a windowed
model without rope) in GLM-4's four-norm layer, experts in every layer (moe_config.py).
Hy3 (HYV3ForCausalLM): Apertus's attention (per-head q/k norms before rope, attention_bias on all four projections)
in Llama's layer, DeepSeek-V3's sigmoid routing without groups, dense layers by mlp_layer_types.
Laguna (LagunaForCausalLM): per-head q/k norms, a softplus output gate per head or per head dim (gating), sliding
and full layers by layer_types, each type with its own rope base and rotated dims; experts as moe_config.py reads.
Mellum (MellumForCausalLM): Laguna's layers with Qwen3-MoE's attention (no gate) and routing.
Flint (FlintForCausalLM): Qwen3-MoE's attention with gpt-oss's sinks, rope on the sliding layers only.
"""

from typing import Any, Dict, Mapping, Optional

from .llama_like_config import _exaone4

NEWER_MOE_MODEL_TYPES = {"minicpm5_moe": "MiniCPM5MoeForCausalLM", "kolibri1": "Kolibri1ForCausalLM",
                         "hy_v3": "HYV3ForCausalLM", "laguna": "LagunaForCausalLM", "mellum": "MellumForCausalLM",
                         "flint": "FlintForCausalLM"}
# the names released checkpoints give architectures that transformers spells otherwise
NEWER_MOE_ALIASES = {"MiniCPM5MoEForCausalLM": "MiniCPM5MoeForCausalLM"}


def _minicpm5_moe(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "use_gated_attention", True) is False:
        raise ValueError(f"{arch}: use_gated_attention=False is not supported (HF's MiniCPM5Moe refuses it too)")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    return {}


def _kolibri1(arch: str, hf_config) -> Dict[str, Any]:
    """EXAONE 4's attention fields (its sliding layers are read by config.py from layer_types)."""
    return _exaone4(arch, hf_config)


def _hy_v3(arch: str, hf_config) -> Dict[str, Any]:
    return dict(qk_norm=True, o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _laguna(arch: str, hf_config) -> Dict[str, Any]:
    heads = set(getattr(hf_config, "num_attention_heads_per_layer", None) or [hf_config.num_attention_heads])
    if heads != {hf_config.num_attention_heads}:
        raise ValueError(f"{arch}: num_attention_heads_per_layer other than num_attention_heads on every layer is "
                         "not supported")
    if getattr(hf_config, "moe_apply_router_weight_on_input", False):
        raise ValueError(f"{arch}: moe_apply_router_weight_on_input=True is not supported")
    gating = getattr(hf_config, "gating", True)
    if gating not in (True, False, "per-head", "per-element"):
        raise ValueError(f"{arch}: gating {gating!r} is not supported; supported: True, per-head, per-element")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, o_proj_bias=bias, gate_per_head=gating is True or gating == "per-head",   # as HF reads it
                **_layer_type_rope(arch, hf_config))


def _mellum(arch: str, hf_config) -> Dict[str, Any]:
    """Qwen3-MoE's attention (per-head q/k norms, attention_bias on all four projections), rotating every head dim
    (HF's Mellum cannot run a partial_rotary_factor)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    for each in [params] + [p for p in params.values() if isinstance(p, Mapping)]:
        if each.get("partial_rotary_factor") not in (None, 1, 1.0):
            raise ValueError(f"{arch}: partial_rotary_factor {each['partial_rotary_factor']} is not supported")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, o_proj_bias=bias, **_layer_type_rope(arch, hf_config))


def _flint(arch: str, hf_config) -> Dict[str, Any]:
    """Qwen3-MoE's attention; only the sliding layers rotate (HF: those with a window; none without sliding_window).
    Its windows are read by config.py from layer_types."""
    types = list(hf_config.layer_types)
    windowed = getattr(hf_config, "sliding_window", None) is not None
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, o_proj_bias=bias,
                nope_layers=tuple(i for i, t in enumerate(types) if t != "sliding_attention" or not windowed))


def _layer_type_rope(arch: str, hf_config) -> Dict[str, Any]:
    """Laguna's and Mellum's rope_parameters keyed by layer type -> the full layers' parameters (rope_params) and
    rotated dims (rotary_dim), the sliding layers' default rope base and rotated dims, and each layer's window by
    layer_types (set even where it covers every position: the layer's rope follows its type)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if not isinstance(params.get("full_attention"), Mapping):
        params = {"full_attention": params, "sliding_attention": params}
    full, local = dict(params["full_attention"]), dict(params.get("sliding_attention") or params["full_attention"])
    if (local.get("rope_type") or "default") != "default":
        raise ValueError(f"{arch}: scaled rope on sliding layers is not supported")
    head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads)
    rotary_dim = _rotated_dims(arch, head_dim, full.pop("partial_rotary_factor", None))
    if rotary_dim is not None and (full.get("rope_type") or "default") != "default":
        raise ValueError(f"{arch}: partial_rotary_factor with a scaled rope ({full['rope_type']!r}) is not supported")
    window = getattr(hf_config, "sliding_window", None)
    types = list(hf_config.layer_types)
    if set(types) - {"sliding_attention", "full_attention"} or ("sliding_attention" in types and not window):
        raise ValueError(f"{arch}: layer_types {types!r} with sliding_window {window!r} are not supported")
    return dict(rope_params=full, rotary_dim=rotary_dim, local_rope_theta=float(local.get("rope_theta") or 10000.0),
                local_rotary_dim=_rotated_dims(arch, head_dim, local.get("partial_rotary_factor")) or head_dim,
                layer_windows=tuple(int(window) if t == "sliding_attention" else None for t in types))


def _rotated_dims(arch: str, head_dim: int, partial) -> Optional[int]:
    """The first dims of each head that rotate (None: all of them), as HF's int(head_dim * partial_rotary_factor)."""
    if partial in (None, 1, 1.0):
        return None
    dim = int(head_dim * float(partial))
    if dim <= 0 or dim % 2:
        raise ValueError(f"{arch}: partial_rotary_factor {partial} gives {dim} rotated dims of {head_dim}: need an "
                         "even number above 0")
    return dim


NEWER_MOE_FIELDS = {"MiniCPM5MoeForCausalLM": _minicpm5_moe, "Kolibri1ForCausalLM": _kolibri1,
                    "HYV3ForCausalLM": _hy_v3, "LagunaForCausalLM": _laguna, "MellumForCausalLM": _mellum,
                    "FlintForCausalLM": _flint}
