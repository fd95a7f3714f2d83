"""The Hugging Face config fields of Step 3.7's language model (HF Step3p7TextModel, text_config model_type "step3p5",
under Step3p7ForConditionalGeneration served for text prompts: multimodal_wrappers.py) as ModelConfig fields
(family_config.py's contract), and its experts as MoEConfig fields (moe_config.py calls step3_moe).  No torch here.

Pre-norm layers whose RMSNorms (residual, final and per-head q/k) multiply by 1 + weight (Gemma's).  Attention: sliding
and full layers by layer_types, each type with its own rope base and rotated dims (rope_parameters keyed by layer type,
Laguna's reading: newer_moe_config._layer_type_rope); the sliding layers have num_sliding_attention_heads query heads
(HF's per_layer_config), every layer the same K/V heads; scores scaled by query_pre_attn_scalar ** -0.5; the output
times sigmoid(g_proj(x)), one gate per head.  MLPs by mlp_layer_types: the dense SwiGLU of intermediate_size, or
experts (sigmoid scores, the correction bias for the choice only, always renormalised, times
moe_router_scaling_factor) beside a shared expert of share_expert_dim.  Clamps, per layer (0 or None: none): the
experts' silu(gate) at most swiglu_limits[l] and up within +-it; the dense MLP's and the shared expert's by
swiglu_limits_shared[l].  Run by step3.py under the name STEP3_TEXT (HF has no causal LM class of it).
"""

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .newer_moe_config import _layer_type_rope

STEP3_TEXT = "Step3p5ForCausalLM"
STEP3_MODEL_TYPES = {"step3p5": STEP3_TEXT}
_TYPES = ("sliding_attention", "full_attention")


@dataclass(frozen=True)
class Step3Layers:
    heads: Tuple[int, ...]                     # each layer's query heads
    limits: Tuple[Optional[float], ...]        # each layer's experts' clamp (None: none)
    shared_limits: Tuple[Optional[float], ...]  # each layer's dense MLP's or shared expert's clamp (None: none)


def _limits(arch: str, hf_config, field: str, layers: int) -> Tuple[Optional[float], ...]:
    values = getattr(hf_config, field, None)
    if not values:
        return (None,) * layers
    if len(values) < layers:   # HF reads layer l's at [l]: a longer list's tail is never read
        raise ValueError(f"{arch}: {field} must give a value for each of the {layers} layers, got {values}")
    return tuple(float(v) if v else None for v in values[:layers])


def _step3_text(arch: str, hf_config) -> Dict[str, Any]:
    layers = int(hf_config.num_hidden_layers)
    if getattr(hf_config, "use_bidirectional_attention", False):
        raise ValueError(f"{arch}: use_bidirectional_attention=True is not supported")
    gating = getattr(hf_config, "gating", True)
    if not (gating is True or gating == "per-head"):   # HF's per-element gate does not broadcast over its heads
        raise ValueError(f"{arch}: gating {gating!r} is not supported; supported: True, 'per-head'")
    if getattr(hf_config, "mlp_bias", False):
        raise ValueError(f"{arch}: mlp_bias=True is not supported")
    kinds = list(getattr(hf_config, "mlp_layer_types", None) or ())
    if len(kinds) != layers or not set(kinds) <= {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {layers} layers, "
                         f"got {kinds}")
    overrides = dict(getattr(hf_config, "to_dict", dict)().get("per_layer_config") or {})
    if any(set(o) - {"num_attention_heads"} for o in overrides.values()):
        raise ValueError(f"{arch}: per_layer_config overrides other than num_attention_heads are not supported: "
                         f"{overrides}")
    kv = int(hf_config.num_key_value_heads)
    heads = tuple(int(hf_config.per_layer_config[i].num_attention_heads) for i in range(layers))
    if any(h % kv for h in heads):
        raise ValueError(f"{arch}: query heads {heads} per layer must be multiples of num_key_value_heads {kv}")
    types = list(hf_config.layer_types)
    if set(types) - set(_TYPES):
        raise ValueError(f"{arch}: layer_types {types!r} are not supported; supported: {_TYPES}")
    params = dict(hf_config.rope_parameters or {})
    for kind in _TYPES:   # a type no layer has: the other's (never used)
        params.setdefault(kind, params.get(_TYPES[1 - _TYPES.index(kind)]))
    if not all(isinstance(params[kind], Mapping) for kind in _TYPES):
        raise ValueError(f"{arch}: rope_parameters must be keyed by layer type, got {hf_config.rope_parameters}")
    view = _With(hf_config, rope_parameters=params)
    step3 = Step3Layers(heads=heads, limits=_limits(arch, hf_config, "swiglu_limits", layers),
                        shared_limits=_limits(arch, hf_config, "swiglu_limits_shared", layers))
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, o_proj_bias=bias, query_pre_attn_scalar=float(hf_config.query_pre_attn_scalar),
                step3=step3, **_layer_type_rope(arch, view))


class _With:
    """hf_config with some fields replaced (mamba_stack_config.FieldsView's, which moe_config.py cannot import)."""

    def __init__(self, base, **fields):
        self._base, self._fields = base, fields

    def __getattr__(self, name):
        return self._fields[name] if name in self._fields else getattr(self._base, name)


def step3_moe(cls, hf_config):
    """The MoEConfig of the module docstring's experts."""
    return cls(num_experts=int(hf_config.n_routed_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=True,
               sparse_layers=tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse"),
               shared_expert_intermediate_size=int(hf_config.share_expert_dim), shared_expert_gate=False,
               scoring="sigmoid", correction_bias=True,
               routed_scaling_factor=float(hf_config.moe_router_scaling_factor))


STEP3_FIELDS = {STEP3_TEXT: _step3_text}
