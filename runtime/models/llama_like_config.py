"""The Hugging Face config fields of Ministral, Seed-OSS, ERNIE 4.5 (dense), EXAONE 4, Hunyuan (dense), Arcee (AFM),
GLM-4 (2024), Helium, Nemotron, OLMo (1) and Apertus, as ModelConfig fields (family_config.py's contract: each reader returns the keyword arguments ModelConfig.from_hf adds
or overrides).  No torch here.

Their sliding windows, where they have them, come from layer_types by config.py's generic reading.
"""

from typing import Any, Dict, Optional

LLAMA_LIKE_MODEL_TYPES = {"ministral": "MinistralForCausalLM", "seed_oss": "SeedOssForCausalLM",
                          "ernie4_5": "Ernie4_5ForCausalLM", "exaone4": "Exaone4ForCausalLM",
                          "hunyuan_v1_dense": "HunYuanDenseV1ForCausalLM", "arcee": "ArceeForCausalLM",
                          "glm": "GlmForCausalLM", "helium": "HeliumForCausalLM", "nemotron": "NemotronForCausalLM",
                          "olmo": "OlmoForCausalLM", "apertus": "ApertusForCausalLM", "nanochat": "NanoChatForCausalLM"}


def _ministral(arch: str, hf_config) -> Dict[str, Any]:
    """Ministral: Mistral's layer; its sliding and full layers (layer_types) are read by config.py."""
    return {}


def _seed_oss(arch: str, hf_config) -> Dict[str, Any]:
    """Seed-OSS: attention_bias on q/k/v only; the output projection's bias is attention_out_bias."""
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_out_bias", False)))


def _ernie4_5(arch: str, hf_config) -> Dict[str, Any]:
    """ERNIE 4.5: Llama's fields; its interleaved rope is the model class's (ernie.py).  use_bias would put biases on
    every projection, the gated MLP's too, which the released checkpoints do not have and we do not run."""
    if getattr(hf_config, "use_bias", False):
        raise ValueError(f"{arch}: use_bias=True is not supported")
    return {}


def _exaone4(arch: str, hf_config) -> Dict[str, Any]:
    """EXAONE 4: per-head q/k RMSNorms; with a sliding window, its full-attention layers rotate neither q nor k."""
    types = list(getattr(hf_config, "layer_types", None) or [])
    windowed = getattr(hf_config, "sliding_window", None) is not None
    return dict(qk_norm=True, nope_layers=tuple(i for i, t in enumerate(types) if t == "full_attention" and windowed))


def _hunyuan(arch: str, hf_config) -> Dict[str, Any]:
    """Hunyuan dense: per-head q/k RMSNorms after rope; attention_bias on all four projections; NTK-alpha rope."""
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(qk_norm=True, qk_norm_after_rope=True, attention_bias=bias, o_proj_bias=bias,
                rope_params=_ntk_alpha_rope(hf_config))


def _ntk_alpha_rope(hf_config) -> Optional[Dict[str, Any]]:
    """Hunyuan's "dynamic" rope with a fixed alpha is static: the default rope with base theta * alpha ** (D / (D-2))."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    alpha = params.get("alpha")
    if params.get("rope_type") != "dynamic" or not alpha:
        return None   # config.py's own reading
    dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads)
    theta = float(params["rope_theta"]) * float(alpha) ** (dim / (dim - 2))
    return {"rope_type": "default", "rope_theta": theta}


def _arcee(arch: str, hf_config) -> Dict[str, Any]:
    """Arcee (AFM): Llama's attention (attention_bias on all four projections) and a non-gated relu^2 MLP."""
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(hidden_act=_only_activation(arch, hf_config, "relu2"), o_proj_bias=bias)


def _only_activation(arch: str, hf_config, act: str) -> str:
    """`act`, the one activation `arch` runs; ValueError naming hidden_act for any other."""
    theirs = getattr(hf_config, "hidden_act", None)
    if theirs != act:
        raise ValueError(f"{arch}: only the {act} activation is supported, got hidden_act={theirs!r}")
    return act


def _no_fields(arch: str, hf_config) -> Dict[str, Any]:
    """GLM-4 (2024) and Helium: the generic fields suffice (q/k/v attention_bias, no o_proj bias, partial rotary)."""
    return {}


def _nemotron(arch: str, hf_config) -> Dict[str, Any]:
    """Nemotron: LayerNorm1P (norm_eps), attention_bias on all four projections, a non-gated relu^2 MLP (mlp_bias on
    both projections); partial rotary is read by config.py."""
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(hidden_act=_only_activation(arch, hf_config, "relu2"), rms_norm_eps=float(hf_config.norm_eps),
                o_proj_bias=bias, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)))


def _olmo(arch: str, hf_config) -> Dict[str, Any]:
    """OLMo (1): LayerNorms without parameters (HF's fixed eps 1e-5), attention_bias on all four projections and
    q/k/v clamped to +-clip_qkv."""
    clip = getattr(hf_config, "clip_qkv", None)
    if clip is not None and float(clip) <= 0:
        raise ValueError(f"{arch}: clip_qkv must be positive, got {clip!r}")
    return dict(rms_norm_eps=1e-5, o_proj_bias=bool(getattr(hf_config, "attention_bias", False)),
                clip_qkv=None if clip is None else float(clip))


def _apertus(arch: str, hf_config) -> Dict[str, Any]:
    """Apertus: per-head q/k RMSNorms before rope, attention_bias on all four projections, a non-gated xIELU MLP."""
    return dict(hidden_act=_only_activation(arch, hf_config, "xielu"), qk_norm=True,
                o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _nanochat(arch: str, hf_config) -> Dict[str, Any]:
    """NanoChat: a non-gated relu^2 MLP, weightless per-head q/k norms after rope, attention_bias on all four
    projections, logits soft-capped.  Its embeddings are normalised at load, so they cannot be the lm head too."""
    if getattr(hf_config, "tie_word_embeddings", False):
        raise ValueError(f"{arch}: tie_word_embeddings=True is not supported")
    cap = getattr(hf_config, "final_logit_softcapping", None)
    return dict(hidden_act=_only_activation(arch, hf_config, "relu2"), qk_norm=True, qk_norm_after_rope=True,
                o_proj_bias=bool(getattr(hf_config, "attention_bias", False)), final_softcap=float(cap) if cap else None)


LLAMA_LIKE_FIELDS = {"MinistralForCausalLM": _ministral, "SeedOssForCausalLM": _seed_oss,
                     "Ernie4_5ForCausalLM": _ernie4_5, "Exaone4ForCausalLM": _exaone4,
                     "HunYuanDenseV1ForCausalLM": _hunyuan, "ArceeForCausalLM": _arcee,
                     "GlmForCausalLM": _no_fields, "HeliumForCausalLM": _no_fields, "NemotronForCausalLM": _nemotron,
                     "OlmoForCausalLM": _olmo, "ApertusForCausalLM": _apertus, "NanoChatForCausalLM": _nanochat}


def _granite(hf_config) -> Dict[str, Any]:
    return dict(embedding_multiplier=float(hf_config.embedding_multiplier),
                residual_multiplier=float(hf_config.residual_multiplier),
                attention_multiplier=float(hf_config.attention_multiplier),
                logits_scaling=float(hf_config.logits_scaling))
