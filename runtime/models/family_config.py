"""The Hugging Face config fields of the Gemma 1/2/3 (text), Phi-3, OLMo 2/3, Granite, SmolLM3, StarCoder2, StableLM,
Phi, Cohere and GLM-4 families, as ModelConfig fields (Ministral, Seed-OSS, ERNIE 4.5, EXAONE 4, Hunyuan and Arcee:
llama_like_config.py).

No torch here (config.py's rule).  Each reader returns the keyword arguments ModelConfig.from_hf adds or
overrides for its architecture: per-layer sliding windows (enforced by the attention kernels, so the context is
not capped to the window), soft-caps, the score scale, the activation, Gemma 3's local rope base and Phi-3's
LongRoPE factors; Granite's four multipliers and SmolLM3's layers without rotary embedding.
"""

import math
from typing import Any, Dict, Mapping, Optional

from .alibi_config import ALIBI_FIELDS, ALIBI_MODEL_TYPES
from .beam_config import BEAM_FIELDS, BEAM_MODEL_TYPES
from .bert_config import BERT_LIKE_FIELDS, BERT_LIKE_MODEL_TYPES
from .chameleon_config import CHAMELEON_FIELDS, CHAMELEON_MODEL_TYPES
from .decoder_config import BART_LIKE_FIELDS, BART_LIKE_MODEL_TYPES
from .deepseek_ocr2_config import DEEPSEEK_OCR2_FIELDS, DEEPSEEK_OCR2_MODEL_TYPES
from .doge_config import DOGE_FIELDS, DOGE_MODEL_TYPES
from .dory_config import DORY_FIELDS, DORY_MODEL_TYPES
from .dots3_config import DOTS3_FIELDS, DOTS3_MODEL_TYPES
from .early_gpt_config import EARLY_GPT_FIELDS, EARLY_GPT_MODEL_TYPES
from .encdec_config import ENCDEC_FIELDS, ENCDEC_MODEL_TYPES
from .ergo_config import ERGO_FIELDS, ERGO_MODEL_TYPES
from .gemma3n_config import GEMMA3N_FIELDS, GEMMA3N_MODEL_TYPES
from .gpt_config import GPT_FIELDS, GPT_MODEL_TYPES
from .granite_swa_config import GRANITE_SWA_FIELDS, GRANITE_SWA_MODEL_TYPES
from .hrm_text_config import HRM_TEXT_FIELDS, HRM_TEXT_MODEL_TYPES
from .hy_v4_config import HY_V4_FIELDS, HY_V4_MODEL_TYPES
from .jetmoe_config import JETMOE_FIELDS, JETMOE_MODEL_TYPES
from .kolibri1_1_config import KOLIBRI1_1_FIELDS, KOLIBRI1_1_MODEL_TYPES
from .layer_fields import GELU_TANH, _gelu_tanh, layer_windows
from .llama_like_config import LLAMA_LIKE_FIELDS, LLAMA_LIKE_MODEL_TYPES, _granite
from .longcat_flash_config import LONGCAT_FIELDS, LONGCAT_MODEL_TYPES
from .mimo_v2_flash_config import MIMO_FIELDS, MIMO_MODEL_TYPES
from .minimax_m3_config import MINIMAX_M3_FIELDS, MINIMAX_M3_MODEL_TYPES
from .mistral_large4_config import MISTRAL_LARGE4_FIELDS, MISTRAL_LARGE4_MODEL_TYPES
from .mllama_config import MLLAMA_FIELDS, MLLAMA_MODEL_TYPES
from .modernbert_config import MODERNBERT_FIELDS, MODERNBERT_MODEL_TYPES
from .moe_family_config import MOE_FAMILY_FIELDS, MOE_FAMILY_MODEL_TYPES
from .more_dense_config import MORE_DENSE_FIELDS, MORE_DENSE_MODEL_TYPES
from .muse_config import MUSE_FIELDS, MUSE_MODEL_TYPES
from .newer_moe_config import NEWER_MOE_FIELDS, NEWER_MOE_MODEL_TYPES
from .newtext_config import NEWTEXT_FIELDS, NEWTEXT_MODEL_TYPES
from .step3_config import STEP3_FIELDS, STEP3_MODEL_TYPES
from .zaya_config import ZAYA_FIELDS, ZAYA_MODEL_TYPES

GEMMA_ARCHITECTURES = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
LLAMA_VARIANTS = ("GraniteForCausalLM", "SmolLM3ForCausalLM")   # llama.py's model with ModelConfig fields set
FAMILY_ARCHITECTURES = GEMMA_ARCHITECTURES + ("Phi3ForCausalLM", "GptOssForCausalLM") + (
    "GemmaForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM") + LLAMA_VARIANTS + (
    "Starcoder2ForCausalLM", "StableLmForCausalLM", "PhiForCausalLM", "CohereForCausalLM", "Glm4ForCausalLM") + (
    tuple(LLAMA_LIKE_FIELDS)) + tuple(MOE_FAMILY_FIELDS)
MODEL_TYPES = {"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM",
               "gpt_oss": "GptOssForCausalLM", "gemma": "GemmaForCausalLM", "olmo2": "Olmo2ForCausalLM",
               "olmo3": "Olmo3ForCausalLM", "granite": "GraniteForCausalLM", "smollm3": "SmolLM3ForCausalLM",
               "starcoder2": "Starcoder2ForCausalLM", "stablelm": "StableLmForCausalLM", "phi": "PhiForCausalLM",
               "cohere": "CohereForCausalLM", "glm4": "Glm4ForCausalLM", **LLAMA_LIKE_MODEL_TYPES,
               **MOE_FAMILY_MODEL_TYPES}


def family_fields(arch: str, hf_config) -> Dict[str, Any]:
    """ModelConfig keyword arguments of `arch` (one of FAMILY_ARCHITECTURES); ValueError for what we do not run."""
    if arch in GEMMA_ARCHITECTURES:
        return _gemma(arch, hf_config)
    if arch == "GemmaForCausalLM":
        return _gemma1(hf_config)
    if arch == "Olmo2ForCausalLM":
        return _no_attention_bias(arch, hf_config)
    if arch == "Olmo3ForCausalLM":
        return _olmo3(arch, hf_config)
    if arch == "Starcoder2ForCausalLM":
        return _starcoder2(hf_config)
    if arch == "StableLmForCausalLM":
        return _stablelm(hf_config)
    if arch in MORE_FAMILY_FIELDS:
        return MORE_FAMILY_FIELDS[arch](arch, hf_config)
    if arch == "GptOssForCausalLM":   # sliding and full layers (layer_types; default: every other one sliding)
        return dict(layer_windows=layer_windows(hf_config, lambda i: bool((i + 1) % 2)))
    if arch == "GraniteForCausalLM":
        return _granite(hf_config)
    if arch == "SmolLM3ForCausalLM":
        return _smollm3(hf_config)
    return _phi3(hf_config)


def _no_attention_bias(arch: str, hf_config) -> Dict[str, Any]:
    """Gemma 1 and OLMo 2 run without attention biases (their released checkpoints have none)."""
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    return {}


def _gemma1(hf_config) -> Dict[str, Any]:
    """Gemma 1: the gelu-tanh MLP, no windows, no soft-caps, scores scaled by head_dim ** -0.5."""
    arch = "GemmaForCausalLM"
    return dict(_no_attention_bias(arch, hf_config), hidden_act=_gelu_tanh(arch, hf_config))


def _olmo3(arch: str, hf_config) -> Dict[str, Any]:
    """OLMo 3: OLMo 2's layer; three sliding-window layers to each full one (or layer_types), rope per layer type."""
    fields = dict(_no_attention_bias(arch, hf_config),
                  layer_windows=layer_windows(hf_config, lambda i: bool((i + 1) % 4)))
    return dict(fields, **_per_layer_type_rope(arch, getattr(hf_config, "rope_parameters", None) or {}))


def _per_layer_type_rope(arch: str, params: Mapping) -> Dict[str, Any]:
    """rope_parameters keyed by layer type -> the full layers' parameters and the sliding layers' (default) base."""
    local = dict(params.get("sliding_attention") or {})
    if (local.get("rope_type") or "default") != "default":
        raise ValueError(f"{arch}: scaled rope on sliding layers is not supported")
    return dict(local_rope_theta=float(local.get("rope_theta") or 10000.0), rope_params=dict(params["full_attention"]))


def _starcoder2(hf_config) -> Dict[str, Any]:
    """StarCoder2: LayerNorms (norm_epsilon), use_bias on q/k/v/o and both MLP projections, a gelu MLP, the window
    on every layer (dropped where it covers every position)."""
    act = getattr(hf_config, "hidden_act", None)
    if act not in GELU_TANH + ("gelu",):
        raise ValueError(f"Starcoder2ForCausalLM: only the gelu activations are supported, got {act!r}")
    window = getattr(hf_config, "sliding_window", None)
    binds = bool(window) and int(window) < int(hf_config.max_position_embeddings)
    bias = bool(getattr(hf_config, "use_bias", True))
    return dict(hidden_act="gelu" if act == "gelu" else "gelu_tanh", rms_norm_eps=float(hf_config.norm_epsilon),
                attention_bias=bias, o_proj_bias=bias, mlp_bias=bias,
                layer_windows=layer_windows(hf_config, lambda i: True) if binds else ())


def _stablelm(hf_config) -> Dict[str, Any]:
    """StableLM: LayerNorms (layer_norm_eps), q/k/v bias by use_qkv_bias, per-head q/k LayerNorms (qk_layernorm) and
    the parallel residual; partial rotary is read by config.py."""
    return dict(rms_norm_eps=float(hf_config.layer_norm_eps), attention_bias=bool(hf_config.use_qkv_bias),
                o_proj_bias=False, qk_norm=bool(hf_config.qk_layernorm),
                parallel_residual=bool(hf_config.use_parallel_residual))


def _gemma(arch: str, hf_config) -> Dict[str, Any]:
    _gelu_tanh(arch, hf_config)
    if getattr(hf_config, "use_bidirectional_attention", False):
        raise ValueError(f"{arch}: bidirectional attention (embedding models) is not supported")
    gemma3 = arch == "Gemma3ForCausalLM"
    pattern = int(getattr(hf_config, "_sliding_window_pattern", None) or (6 if gemma3 else 2))
    fields = dict(
        hidden_act="gelu_tanh",
        layer_windows=layer_windows(hf_config, lambda i: bool((i + 1) % pattern)),
        attn_softcap=_positive(getattr(hf_config, "attn_logit_softcapping", None)),
        final_softcap=_positive(getattr(hf_config, "final_logit_softcapping", None)),
        query_pre_attn_scalar=float(hf_config.query_pre_attn_scalar),
        qk_norm=gemma3,
    )
    params = getattr(hf_config, "rope_parameters", None) or {}
    if gemma3 and isinstance(params.get("full_attention"), Mapping):
        fields.update(_per_layer_type_rope(arch, params))
    elif gemma3:
        fields["local_rope_theta"] = float(getattr(hf_config, "rope_local_base_freq", None) or 10000.0)
    return fields


def _phi3(hf_config) -> Dict[str, Any]:
    window = getattr(hf_config, "sliding_window", None)
    n = int(hf_config.num_hidden_layers)
    return dict(layer_windows=tuple([int(window)] * n) if window else ())


def _smollm3(hf_config) -> Dict[str, Any]:
    """no_rope_layers: 1 where a layer rotates q and k, 0 where it does not (NoPE).  Its sliding window, where
    use_sliding_window turns it on, is enforced on every layer by the attention kernels (config.py)."""
    use_rope = list(hf_config.no_rope_layers)
    if len(use_rope) != int(hf_config.num_hidden_layers):
        raise ValueError(f"no_rope_layers {use_rope!r} does not have one entry per layer")
    return dict(nope_layers=tuple(i for i, rope in enumerate(use_rope) if not rope))


def longrope_scaling(params: Mapping, hf_config, rope_dim: int, mscales: bool = False) -> Dict[str, Any]:
    """Phi-3's LongRoPE ("longrope", or "su" in older configs) as a plain rope_scaling dict: short and long
    per-frequency factors, the original context where long takes over and the cos/sin attention factor (mscales,
    Phi-3.5-MoE's: short_mscale, and long_mscale from the original context on)."""
    orig = int(params.get("original_max_position_embeddings")
               or getattr(hf_config, "original_max_position_embeddings", None) or hf_config.max_position_embeddings)
    short, long_ = [float(x) for x in params["short_factor"]], [float(x) for x in params["long_factor"]]
    if len(short) != rope_dim // 2 or len(long_) != rope_dim // 2:
        raise ValueError(f"longrope factors must have one entry per rotated pair of dims ({rope_dim // 2})")
    factor = params.get("factor") or hf_config.max_position_embeddings / orig
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    scaling = {"rope_type": "longrope", "short_factor": short, "long_factor": long_,
               "original_max_position_embeddings": orig, "attention_factor": float(attention)}
    if mscales:   # Phi-3.5-MoE: its own factor on each side (HF's PhimoeConfig requires both)
        scaling.update(attention_factor=float(params["short_mscale"]), long_attention_factor=float(params["long_mscale"]))
    return scaling


def yarn_scaling(params: Mapping, hf_config, rope_dim: int) -> Dict[str, Any]:
    """YaRN (gpt-oss, long-context Qwen and Llama configs) as a plain rope_scaling dict, with HF's defaults: beta_fast 32, beta_slow 1, truncate True,
    attention factor 0.1 ln(factor) + 1 (or from mscale / mscale_all_dim) multiplying cos and sin."""
    orig = int(params.get("original_max_position_embeddings") or hf_config.max_position_embeddings)
    factor = float(params.get("factor") or hf_config.max_position_embeddings / orig)

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = params.get("attention_factor")
    if attention is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    return {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": orig,
            "beta_fast": float(params.get("beta_fast") or 32), "beta_slow": float(params.get("beta_slow") or 1),
            "truncate": bool(params.get("truncate", True)), "attention_factor": float(attention)}


def _positive(value) -> Optional[float]:
    return float(value) if value else None


def _phi(arch: str, hf_config) -> Dict[str, Any]:
    """Phi (phi-1/1.5/2): LayerNorms, biases on every attention projection, the tanh-gelu MLP, qk_layernorm."""
    act = getattr(hf_config, "hidden_act", None)
    if act not in ("gelu_new",) + GELU_TANH:
        raise ValueError(f"{arch}: only the gelu-tanh activation (gelu_new) is supported, got {act!r}")
    return dict(hidden_act="gelu_tanh", attention_bias=True, rms_norm_eps=float(hf_config.layer_norm_eps),
                qk_norm=bool(getattr(hf_config, "qk_layernorm", False)))


def _cohere(arch: str, hf_config) -> Dict[str, Any]:
    """Cohere (Command-R): LayerNorms without bias, per-head q/k norms (use_qk_norm), logits times logit_scale."""
    scale = getattr(hf_config, "logit_scale", None)
    return dict(rms_norm_eps=float(hf_config.layer_norm_eps), qk_norm=bool(getattr(hf_config, "use_qk_norm", False)),
                logit_scale=None if scale is None else float(scale))


def _glm4(arch: str, hf_config) -> Dict[str, Any]:
    """GLM-4: the generic fields suffice (rms_norm_eps, q/k/v attention_bias, partial_rotary_factor, head_dim)."""
    return {}


MORE_FAMILY_FIELDS = {"PhiForCausalLM": _phi, "CohereForCausalLM": _cohere, "Glm4ForCausalLM": _glm4,
                      **LLAMA_LIKE_FIELDS, **MOE_FAMILY_FIELDS}

# VaultGemma: Gemma 2's fields (its pre-norm layer is the model class's, gemma.py)
FAMILY_ARCHITECTURES += ("VaultGemmaForCausalLM",)
MODEL_TYPES["vaultgemma"] = "VaultGemmaForCausalLM"
MORE_FAMILY_FIELDS["VaultGemmaForCausalLM"] = _gemma

# families whose fields their own modules read: (architecture -> reader, model_type -> architecture)
for _fields, _model_types in (
        (GPT_FIELDS, GPT_MODEL_TYPES),                     # GPT-2, GPT-BigCode, GPT-NeoX, GPT-J, OPT, GPT-Neo, ...
        (MORE_DENSE_FIELDS, MORE_DENSE_MODEL_TYPES),       # Cohere 2, CWM, Jais 2, HyperCLOVA X, DiffLlama
        (NEWER_MOE_FIELDS, NEWER_MOE_MODEL_TYPES),         # MiniCPM 5 MoE, Kolibri 1, Hy3, Laguna, Mellum, Flint
        (GRANITE_SWA_FIELDS, GRANITE_SWA_MODEL_TYPES),     # GraniteSWA, GraniteMoeSWA
        (HRM_TEXT_FIELDS, HRM_TEXT_MODEL_TYPES),           # HRM-Text
        (DORY_FIELDS, DORY_MODEL_TYPES),                   # Dory
        (JETMOE_FIELDS, JETMOE_MODEL_TYPES),               # JetMoE
        (GEMMA3N_FIELDS, GEMMA3N_MODEL_TYPES),             # Gemma 3n
        (NEWTEXT_FIELDS, NEWTEXT_MODEL_TYPES),             # Cohere 2 MoE, BitNet, Emu3, Aria
        (ALIBI_FIELDS, ALIBI_MODEL_TYPES),                 # BLOOM, MPT
        (EARLY_GPT_FIELDS, EARLY_GPT_MODEL_TYPES),         # GPT-1, BioGPT, CTRL
        (ERGO_FIELDS, ERGO_MODEL_TYPES),                   # Ergo
        (ZAYA_FIELDS, ZAYA_MODEL_TYPES),                   # Zaya
        (BEAM_FIELDS, BEAM_MODEL_TYPES),                   # Beam
        (DOTS3_FIELDS, DOTS3_MODEL_TYPES),                 # Dots 3 Note
        (HY_V4_FIELDS, HY_V4_MODEL_TYPES),                 # Hy V4
        (LONGCAT_FIELDS, LONGCAT_MODEL_TYPES),             # LongCat-Flash (its MLA: mla_config.py)
        (MIMO_FIELDS, MIMO_MODEL_TYPES),                   # MiMo-V2-Flash
        (CHAMELEON_FIELDS, CHAMELEON_MODEL_TYPES),         # Chameleon
        (STEP3_FIELDS, STEP3_MODEL_TYPES),                 # Step 3.7's language model
        (DEEPSEEK_OCR2_FIELDS, DEEPSEEK_OCR2_MODEL_TYPES), # DeepSeek-OCR 2's language model
        (MUSE_FIELDS, MUSE_MODEL_TYPES),                   # Muse Glimmer's language model
        (MISTRAL_LARGE4_FIELDS, MISTRAL_LARGE4_MODEL_TYPES),   # Mistral Large 4's language model
        (DOGE_FIELDS, DOGE_MODEL_TYPES),                   # Doge
        (KOLIBRI1_1_FIELDS, KOLIBRI1_1_MODEL_TYPES),       # Kolibri 1.1 (its context: more_recurrent_config.py)
        (BART_LIKE_FIELDS, BART_LIKE_MODEL_TYPES),         # BART-like decoders
        (BERT_LIKE_FIELDS, BERT_LIKE_MODEL_TYPES),         # BERT-like decoders
        (MLLAMA_FIELDS, MLLAMA_MODEL_TYPES),               # Llama 3.2 Vision's text model
        (MODERNBERT_FIELDS, MODERNBERT_MODEL_TYPES),       # ModernBERT decoder (Ettin)
        (ENCDEC_FIELDS, ENCDEC_MODEL_TYPES),               # GIT's text decoder, XLM (causal)
        (MINIMAX_M3_FIELDS, MINIMAX_M3_MODEL_TYPES)):      # MiniMax-M3's language model
    FAMILY_ARCHITECTURES += tuple(_fields)
    MODEL_TYPES.update(_model_types)
    MORE_FAMILY_FIELDS.update(_fields)
