"""Hy V4's fields (HF HYV4ForCausalLM), as ModelConfig fields (family_config.py's contract, and
more_recurrent_config.hf_fields' view of its context).  No torch here.

DeepSeek-V3.2's multi-head latent attention (mla.py; the lightning indexers, "full" or "shared" by indexer_types,
keep every token within index_topk, so dense MLA is exact and the context is capped there: dsa_config.py) with an
output gate per head dim (sigmoid(gate_proj(x))) and a sink logit per head; DeepSeek-V4's hyper-connections: every
token carries hc_mult residual streams, each sublayer reads a mix of them and adds its output to each with its own
weight (HyperStreams), and a last mix feeds the final norm; GLM-4.7-Flash's DeepSeek-V3 routing with SwiGLU experts
whose gate and up are clamped at swiglu_limit (moe_config.py).
"""

from dataclasses import dataclass
from typing import Any, Dict

from .dsa_config import SparseAttention
from .mamba_stack_config import FieldsView
from .mla_config import MLAConfig


@dataclass(frozen=True)
class HyperStreams:
    streams: int            # hc_mult
    magnitude: float        # hc_magnitude: the largest weight of a sublayer's output on a stream
    eps: float              # hc_eps
    swiglu_limit: float     # the experts' clamp
    latent_eps: float = 1e-6   # q_a_layernorm's and kv_a_layernorm's (Hy V4 VL's: rms_norm_eps)


def _hy_v4(arch: str, hf_config) -> Dict[str, Any]:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if (params.get("rope_type") or "default") != "default" or params.get("partial_rotary_factor") not in (None, 1,
                                                                                                           1.0):
        raise ValueError(f"{arch}: rope_parameters {params!r} are not supported; only the default rope")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    layers = int(hf_config.num_hidden_layers)
    types, kinds = list(hf_config.layer_types), list(hf_config.indexer_types)
    if set(types) != {"indexed_attention"} or len(kinds) != layers or set(kinds) - {"full", "shared"} or (
            kinds[0] != "full"):
        raise ValueError(f"{arch}: layer_types {types!r} / indexer_types {kinds!r} are not supported: every layer "
                         "indexed_attention, each 'full' or 'shared', the first 'full'")
    mla = MLAConfig(q_lora_rank=int(hf_config.q_lora_rank), kv_lora_rank=int(hf_config.kv_lora_rank),
                    qk_nope_head_dim=int(hf_config.qk_nope_head_dim), qk_rope_head_dim=int(hf_config.qk_rope_head_dim),
                    v_head_dim=int(hf_config.v_head_dim), rope_interleave=True)
    dsa = SparseAttention(index_topk=int(hf_config.index_topk), index_n_heads=int(hf_config.index_n_heads),
                          index_head_dim=int(hf_config.index_head_dim),
                          indexer_layers=tuple(i for i, k in enumerate(kinds) if k == "full"))
    streams = HyperStreams(int(hf_config.hc_mult), float(hf_config.hc_magnitude), float(hf_config.hc_eps),
                           float(hf_config.swiglu_limit), float(getattr(hf_config, "latent_norm_eps", 1e-6)))
    return dict(head_dim=mla.cache_dim, num_kv_heads=1, rotary_dim=mla.qk_rope_head_dim, mla=mla, dsa=dsa,
                attention_multiplier=mla.qk_head_dim ** -0.5, hyper_streams=streams,
                rope_params={"rope_type": "default", "rope_theta": float(params.get("rope_theta") or 10000.0)})


def hy_v4_view(hf_config) -> FieldsView:
    """The config with its context capped at index_topk (dsa_config.py)."""
    return FieldsView(hf_config, dict(max_position_embeddings=min(int(hf_config.max_position_embeddings),
                                                                  int(hf_config.index_topk))))


HY_V4_FIELDS = {"HYV4ForCausalLM": _hy_v4}
HY_V4_MODEL_TYPES = {"hy_v4": "HYV4ForCausalLM"}
