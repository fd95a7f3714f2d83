"""MiMo-V2-Flash's fields (HF MiMoV2FlashForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch.

Sliding and full layers by layer_types, each type with its own rope base (rope_parameters keyed by layer type; HF's
partial_rotary_factor defaults to 0.334 of head_dim there), Laguna's reading (newer_moe_config._layer_type_rope).
The sliding layers have twice num_key_value_heads and a learned sink logit per query head; every layer's values are
v_head_dim wide (narrower than head_dim, the queries' and keys') and scaled by attention_value_scale.  The KV pool has
one shape: head_dim and the sliding layers' KV heads, so a full layer stores each KV head twice and every value
zero-padded (mimo_v2_flash.py).  Experts: DeepSeek-V3's sigmoid routing without shared experts (moe_config.py), dense
layers by mlp_layer_types.
"""

from dataclasses import dataclass
from typing import Any, Dict, Mapping

from .mamba_stack_config import FieldsView
from .newer_moe_config import _layer_type_rope

DEFAULT_PARTIAL_ROTARY = 0.334   # HF's MiMoV2FlashRotaryEmbedding where a layer type's parameters name none


@dataclass(frozen=True)
class MimoLayers:
    kv_heads: tuple      # per layer: its own KV heads (the pool holds the most of them)
    v_head_dim: int
    value_scale: float   # attention_value_scale: the values' factor


def _mimo_v2_flash(arch: str, hf_config) -> Dict[str, Any]:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if not all(isinstance(params.get(t), Mapping) for t in ("full_attention", "sliding_attention")):
        raise ValueError(f"{arch}: rope_parameters must be keyed by layer type (full_attention, sliding_attention)")
    params = {t: {"partial_rotary_factor": DEFAULT_PARTIAL_ROTARY, **p} for t, p in params.items()}
    if any((p.get("rope_type") or "default") != "default" for p in params.values()):
        raise ValueError(f"{arch}: rope_type other than 'default' is not supported")
    heads = int(hf_config.num_key_value_heads)
    types = list(hf_config.layer_types)
    kv_heads = tuple(2 * heads if t == "sliding_attention" else heads for t in types)
    scale = getattr(hf_config, "attention_value_scale", None)
    layers = MimoLayers(kv_heads=kv_heads, v_head_dim=int(hf_config.v_head_dim),
                        value_scale=1.0 if scale is None else float(scale))
    if layers.v_head_dim > int(hf_config.head_dim):
        raise ValueError(f"{arch}: v_head_dim {layers.v_head_dim} above head_dim {hf_config.head_dim} is not supported")
    return dict(num_kv_heads=max(kv_heads), mimo=layers, o_proj_bias=False,
                **_layer_type_rope(arch, FieldsView(hf_config, {"rope_parameters": params})))


MIMO_FIELDS = {"MiMoV2FlashForCausalLM": _mimo_v2_flash}
MIMO_MODEL_TYPES = {"mimo_v2_flash": "MiMoV2FlashForCausalLM"}
