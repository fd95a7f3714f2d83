"""The Hugging Face config fields of GLM-4.5 (Glm4Moe) and dots.llm1 (Dots1) attention, as ModelConfig fields
(family_config.py's contract: each reader returns the keyword arguments ModelConfig.from_hf adds or overrides).  Their
mixture of experts is read by moe_config.py.  No torch here.

GLM-4.5: q/k/v biases (attention_bias, never on o_proj), per-head q/k RMSNorms before rope where use_qk_norm, and the
first half of each head rotating (partial_rotary_factor, 0.5 by default; rotate-half pairs, not GLM-4's interleaved
ones: HF's Glm4MoeAttention).  dots.llm1: Qwen3's attention (per-head q/k RMSNorms, attention_bias on all four
projections); its sliding layers, where layer_types has any, are read by config.py.  MiniMax-M2: q/k RMSNorms over
the whole q and k projections (minimax_m2.py), partial rotary as GLM-4.5's.  OLMoE: the same whole-width q/k
norms, then q, k and v clamped to +-clip_qkv (olmoe.py), attention_bias on all four projections.  Granite 3 MoE:
Granite's four multipliers (family_config._granite), attention_bias on all four projections.  ERNIE 4.5 MoE: dense
ERNIE 4.5's fields (llama_like_config.py); Hunyuan MoE: dense Hunyuan's (q/k norms after rope, NTK-alpha rope).
Phi-3.5-MoE (Phimoe): attention_bias on all four projections; LongRoPE with its short/long mscale read by config.py.
DBRX: its own names (d_model, n_heads, ... mapped by DbrxConfig), attn_config (kv_n_heads, clip_qkv, rope_theta) and
ffn_config (ffn_hidden_size, ffn_act_fn); nn.LayerNorm's default epsilon.  Arcee Trinity (Afmoe): per-head q/k norms,
attention_bias on all four projections, no rope on its full-attention layers (nope_layers), embeddings times
sqrt(hidden_size) where mup_enabled; its sliding layers are read by config.py.
Solar Open: Llama's attention (attention_bias on q/k/v only), every layer sparse.  EXAONE MoE (K-EXAONE): EXAONE 4's
attention (per-head q/k norms, no rope on the full layers of a windowed model) in pre-norm layers.  FlexOlmo: OLMo 2's
post-norm layer (whole-width q/k norms) with attention_bias on all four projections.
"""

from typing import Any, Dict

from .llama_like_config import _ernie4_5, _exaone4, _granite, _hunyuan
from .newer_moe_config import NEWER_MOE_ALIASES

MOE_FAMILY_MODEL_TYPES = {"glm4_moe": "Glm4MoeForCausalLM", "dots1": "Dots1ForCausalLM",
                          "minimax_m2": "MiniMaxM2ForCausalLM", "olmoe": "OlmoeForCausalLM",
                          "granitemoe": "GraniteMoeForCausalLM", "granitemoeshared": "GraniteMoeSharedForCausalLM",
                          "ernie4_5_moe": "Ernie4_5_MoeForCausalLM", "hunyuan_v1_moe": "HunYuanMoEV1ForCausalLM",
                          "phimoe": "PhimoeForCausalLM", "dbrx": "DbrxForCausalLM",
                          "afmoe": "AfmoeForCausalLM", "solar_open": "SolarOpenForCausalLM",
                          "exaone_moe": "ExaoneMoeForCausalLM", "flex_olmo": "FlexOlmoForCausalLM"}


# the names hub checkpoints give architectures that transformers spells otherwise (Phi-3.5-MoE's remote code)
ARCHITECTURE_ALIASES = {"PhiMoEForCausalLM": "PhimoeForCausalLM", **NEWER_MOE_ALIASES}


def _glm4_moe(arch: str, hf_config) -> Dict[str, Any]:
    return dict(qk_norm=bool(getattr(hf_config, "use_qk_norm", False)))


def _dots1(arch: str, hf_config) -> Dict[str, Any]:
    return dict(qk_norm=True, o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _minimax_m2(arch: str, hf_config) -> Dict[str, Any]:
    """q/k norms always (whole-width: the model class's), no attention biases; partial rotary read by config.py
    (transformers turns the released rotary_dim into partial_rotary_factor)."""
    if getattr(hf_config, "use_qk_norm", True) is False:
        raise ValueError(f"{arch}: use_qk_norm=False is not supported")
    return dict(qk_norm=True)


def _olmoe(arch: str, hf_config) -> Dict[str, Any]:
    """Whole-width norms need the head width HF's q_norm assumes (hidden_size / num_attention_heads)."""
    if getattr(hf_config, "head_dim", None) not in (None, hf_config.hidden_size // hf_config.num_attention_heads):
        raise ValueError(f"{arch}: head_dim must be hidden_size / num_attention_heads (HF's q_norm width)")
    clip = getattr(hf_config, "clip_qkv", None)
    return dict(qk_norm=True, o_proj_bias=bool(getattr(hf_config, "attention_bias", False)),
                clip_qkv=None if clip is None else float(clip))


def _granite_moe(arch: str, hf_config) -> Dict[str, Any]:
    return dict(_granite(hf_config), o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _phimoe(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "lm_head_bias", False):
        raise ValueError(f"{arch}: lm_head_bias=True is not supported")
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _dbrx(arch: str, hf_config) -> Dict[str, Any]:
    """rope_theta from attn_config, as DBRX's own code and vLLM read it (HF 5 reads rope_parameters, which a config
    without them leaves at 10000); default rope only."""
    attn, ffn = hf_config.attn_config, hf_config.ffn_config
    act = (getattr(ffn, "ffn_act_fn", None) or {}).get("name", "silu")
    if act != "silu":
        raise ValueError(f"{arch}: ffn_config.ffn_act_fn {act!r} is not supported (silu only)")
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{arch}: rope_parameters rope_type {params['rope_type']!r} is not supported")
    theta = getattr(attn, "rope_theta", None) or params.get("rope_theta") or 10000.0
    clip = getattr(attn, "clip_qkv", None)
    return dict(intermediate_size=int(ffn.ffn_hidden_size), rms_norm_eps=1e-5,
                rope_params={"rope_type": "default", "rope_theta": float(theta)},
                clip_qkv=None if clip is None else float(clip))


def _afmoe(arch: str, hf_config) -> Dict[str, Any]:
    types = list(hf_config.layer_types)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, o_proj_bias=bias, nope_layers=tuple(i for i, t in enumerate(types) if t == "full_attention"),
                embedding_multiplier=float(hf_config.hidden_size) ** 0.5 if hf_config.mup_enabled else 1.0)


def _solar_open(arch: str, hf_config) -> Dict[str, Any]:
    """No dense layer, so no intermediate_size in its config: the experts' width stands in (unused)."""
    return dict(intermediate_size=int(hf_config.moe_intermediate_size))


def _flex_olmo(arch: str, hf_config) -> Dict[str, Any]:
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


MOE_FAMILY_FIELDS = {"Glm4MoeForCausalLM": _glm4_moe, "Dots1ForCausalLM": _dots1, "MiniMaxM2ForCausalLM": _minimax_m2,
                     "OlmoeForCausalLM": _olmoe, "GraniteMoeForCausalLM": _granite_moe,
                     "GraniteMoeSharedForCausalLM": _granite_moe, "Ernie4_5_MoeForCausalLM": _ernie4_5,
                     "HunYuanMoEV1ForCausalLM": _hunyuan, "PhimoeForCausalLM": _phimoe,
                     "DbrxForCausalLM": _dbrx, "AfmoeForCausalLM": _afmoe, "SolarOpenForCausalLM": _solar_open,
                     "ExaoneMoeForCausalLM": _exaone4, "FlexOlmoForCausalLM": _flex_olmo}
