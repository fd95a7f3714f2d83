"""Zaya's fields (HF ZayaForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Zaya's attention is Compressed Convolutional Attention (CCA): q and k projections pass through a causal depthwise
convolution of width cca_time0 and then a convolution of width cca_time1 grouped per head, plus residual paths; half
of each value comes from the previous token (a delayed projection).  So every layer keeps, per request, the last
(cca_time0 - 1) + (cca_time1 - 1) q/k projections and one delayed value projection beside its KV (ZayaLayout).
Layers "hybrid" (full) and "hybrid_sliding" (window sliding_window) each rotate by their own rope_parameters (read as
Laguna's: newer_moe_config.py).  The router is an MLP over a down projection that also carries a state from the layer
before, choosing one of num_experts + 1 (the last: no expert); experts are Qwen3-MoE's.
"""

from dataclasses import dataclass
from typing import Any, Dict

from .mamba_stack_config import FieldsView
from .newer_moe_config import _layer_type_rope

_TYPES = {"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}


@dataclass(frozen=True)
class ZayaLayout:
    conv_widths: tuple          # (cca_time0, cca_time1)
    router_hidden_size: int
    num_experts: int
    lm_head_bias: bool

    @property
    def conv_kernel(self) -> int:
        """The q/k inputs one output reads: the last conv_kernel - 1 are kept per request."""
        return self.conv_widths[0] + self.conv_widths[1] - 1


def _zaya(arch: str, hf_config) -> Dict[str, Any]:
    types = list(hf_config.layer_types)
    if set(types) - set(_TYPES):
        raise ValueError(f"{arch}: layer_types {types!r} are not supported; supported: {', '.join(_TYPES)}")
    if int(hf_config.num_experts_per_tok) != 1:
        raise ValueError(f"{arch}: num_experts_per_tok {hf_config.num_experts_per_tok} is not supported (HF's Zaya "
                         "routes each token to 1)")
    widths = (int(hf_config.cca_time0), int(hf_config.cca_time1))
    kv_heads, head_dim = int(hf_config.num_key_value_heads), int(hf_config.head_dim)
    if min(widths) < 1 or kv_heads * head_dim % 2:
        raise ValueError(f"{arch}: cca_time0/cca_time1 {widths} must be at least 1 and the values' width even")
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if any(isinstance(v, dict) for v in params.values()):   # the hub's config: a stray top-level rope_type too
        params.pop("rope_type", None)
    view = FieldsView(hf_config, dict(layer_types=[_TYPES[t] for t in types],
                                      rope_parameters={_TYPES.get(k, k): v for k, v in params.items()}))
    bias = bool(getattr(hf_config, "attention_bias", False))
    layout = ZayaLayout(widths, int(hf_config.router_hidden_size), int(hf_config.num_experts),
                        bool(getattr(hf_config, "lm_head_bias", False)))
    return dict(intermediate_size=int(hf_config.moe_intermediate_size), head_dim=head_dim, attention_bias=bias,
                o_proj_bias=bias, zaya=layout, **_layer_type_rope(arch, view))


ZAYA_FIELDS = {"ZayaForCausalLM": _zaya}
ZAYA_MODEL_TYPES = {"zaya": "ZayaForCausalLM"}
