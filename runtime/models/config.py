"""ModelConfig: the numbers our model code needs, read once from a Hugging Face config.

No torch here: the scheduler and launcher read this too.  Supported architectures are the Llama
family with the same layer shape: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v
bias) and Qwen3ForCausalLM (per-head q/k RMSNorm); their mixture-of-experts relatives with the same
attention: MixtralForCausalLM, Qwen2MoeForCausalLM (shared expert) and Qwen3MoeForCausalLM (moe_config.py);
and Gemma2ForCausalLM, Gemma3ForCausalLM (text), Phi3ForCausalLM, GptOssForCausalLM, GemmaForCausalLM,
Olmo2ForCausalLM, Olmo3ForCausalLM, GraniteForCausalLM, SmolLM3ForCausalLM, Starcoder2ForCausalLM,
StableLmForCausalLM, PhiForCausalLM, CohereForCausalLM, Glm4ForCausalLM, MinistralForCausalLM, SeedOssForCausalLM,
Ernie4_5ForCausalLM, Exaone4ForCausalLM, HunYuanDenseV1ForCausalLM and ArceeForCausalLM, whose own fields are read by
family_config.py (and llama_like_config.py); Gemma3ForConditionalGeneration's language model, read from its
text_config (text prompts only: MULTIMODAL_TEXT_ARCHITECTURES).  Anything else raises ValueError.
"""

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from radixlm.runtime.models.moe_config import MOE_ARCHITECTURES, MoEConfig

from .family_config import (
    FAMILY_ARCHITECTURES,
    MODEL_TYPES,
    family_fields,
    layer_windows,
    longrope_scaling,
    yarn_scaling,
)

# multimodal architecture -> the architecture of its language model, which we serve for text prompts
MULTIMODAL_TEXT_ARCHITECTURES = {"Gemma3ForConditionalGeneration": "Gemma3ForCausalLM"}
SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
) + FAMILY_ARCHITECTURES + tuple(MULTIMODAL_TEXT_ARCHITECTURES)
_QWEN2_ATTENTION = ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM")    # q/k/v bias, no o_proj bias
_QWEN3_ATTENTION = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")    # q/k norm, attention_bias on all four
_O_BIAS = ("LlamaForCausalLM", "GptOssForCausalLM") + _QWEN3_ATTENTION   # attention_bias covers o_proj too
_O_BIAS += ("GraniteForCausalLM", "SmolLM3ForCausalLM", "PhiForCausalLM", "CohereForCausalLM")
_USE_SLIDING_WINDOW = _QWEN2_ATTENTION + _QWEN3_ATTENTION + ("SmolLM3ForCausalLM",)  # window off unless switched on
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")
# whose HF model rotates only the first dims of each head
PARTIAL_ROTARY_ARCHITECTURES = ("Phi3ForCausalLM", "StableLmForCausalLM", "PhiForCausalLM", "Glm4ForCausalLM")
PARTIAL_ROTARY_ARCHITECTURES += ("GlmForCausalLM", "NemotronForCausalLM")
# whose MLP (llama.py's gated one, llama_like.py's relu^2) takes HF's mlp_bias on every projection
_MLP_BIAS = ("LlamaForCausalLM", "GraniteForCausalLM", "SmolLM3ForCausalLM", "SeedOssForCausalLM", "HeliumForCausalLM",
             "ArceeForCausalLM")


@dataclass(frozen=True)
class ModelConfig:
    """Everything the forward pass needs; frozen so it can be shared between components.

    context_length is the longest sequence we run: max_position_embeddings.  Sliding windows shorter than it
    (layer_windows: Mistral, Mixtral, Qwen's and SmolLM3's use_sliding_window, Gemma, Phi-3, gpt-oss, OLMo 3) are
    enforced by the attention kernels.  rope_scaling is None or a plain dict with "rope_type" in
    SUPPORTED_ROPE_TYPES plus that type's parameters ("longrope": family_config.longrope_scaling).
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float              # every norm's epsilon (layer_norm_eps of the LayerNorm families)
    max_position_embeddings: int
    context_length: int
    rope_scaling: Optional[dict] = None
    rotary_dim: Optional[int] = None  # dims of each head that rotate, the first ones (None: all, head_dim)
    tie_word_embeddings: bool = False
    attention_bias: bool = False     # bias on q/k/v projections
    o_proj_bias: bool = False        # bias on the output projection (Llama/Qwen3 attention_bias)
    qk_norm: bool = False            # Qwen3: RMSNorm over head_dim on q and k, before rope
    qk_norm_after_rope: bool = False  # Hunyuan: those norms after rope instead
    eos_token_ids: tuple = field(default_factory=tuple)
    sliding_window: Optional[int] = None
    layer_windows: tuple = ()        # per layer: enforced sliding window or None (full); () for none at all
    attn_softcap: Optional[float] = None     # Gemma 2: scores -> cap * tanh(scores / cap)
    final_softcap: Optional[float] = None    # Gemma 2: logits -> cap * tanh(logits / cap)
    query_pre_attn_scalar: Optional[float] = None  # Gemma: scores scaled by its ** -0.5, not head_dim's
    hidden_act: str = "silu"         # "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)
    local_rope_theta: Optional[float] = None  # Gemma 3: the rope base of the sliding-window layers
    logit_scale: Optional[float] = None  # Cohere: logits multiplied by it
    moe: Optional[MoEConfig] = None  # mixture-of-experts models only
    embedding_multiplier: float = 1.0     # Granite: embeddings times this
    residual_multiplier: float = 1.0      # Granite: each sublayer's output times this before it joins the residual
    attention_multiplier: Optional[float] = None  # Granite: the score scale itself, instead of head_dim ** -0.5
    logits_scaling: float = 1.0           # Granite: logits divided by this
    nope_layers: tuple = ()               # SmolLM3: layers whose q and k get no rotary embedding
    mlp_bias: bool = False           # biases on every MLP projection: StarCoder2 (use_bias), Nemotron, _MLP_BIAS
    parallel_residual: bool = False  # StableLM: attention and MLP both read the input norm's output
    clip_qkv: Optional[float] = None  # OLMo: q, k and v clamped to [-clip_qkv, clip_qkv] after their projection

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def rope_dim(self) -> int:
        return self.rotary_dim or self.head_dim

    @property
    def sm_scale(self) -> float:
        """Softmax scale of attention scores: head_dim ** -0.5 (query_pre_attn_scalar ** -0.5 where set;
        attention_multiplier where set)."""
        if self.attention_multiplier is not None:
            return self.attention_multiplier
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @classmethod
    def from_hf(cls, hf_config, generation_config: Optional[Mapping[str, Any]] = None) -> "ModelConfig":
        """Build from a transformers PretrainedConfig (v4 or v5 field names).

        generation_config: the parsed generation_config.json (or a GenerationConfig); its
        eos_token_id is merged with the model config's.  Raises ValueError for an unsupported
        architecture, rope type, activation or MLP bias.
        """
        arch = _architecture(hf_config)
        if arch in MULTIMODAL_TEXT_ARCHITECTURES:
            text = cls.from_hf(_text_config(hf_config, MULTIMODAL_TEXT_ARCHITECTURES[arch]), generation_config)
            return dataclasses.replace(text, architecture=arch)
        extra = family_fields(arch, hf_config) if arch in FAMILY_ARCHITECTURES else {}
        hidden = hf_config.hidden_size
        num_heads = hf_config.num_attention_heads
        num_kv_heads = getattr(hf_config, "num_key_value_heads", None) or num_heads
        head_dim = getattr(hf_config, "head_dim", None) or hidden // num_heads
        act = extra.get("hidden_act") or getattr(hf_config, "hidden_act", "silu")
        if act != extra.get("hidden_act", "silu"):
            raise ValueError(f"{arch}: only the silu (SwiGLU) activation is supported, got {act!r}")
        if arch in _MLP_BIAS:
            extra["mlp_bias"] = bool(getattr(hf_config, "mlp_bias", False))
        elif getattr(hf_config, "mlp_bias", False) and not extra.get("mlp_bias"):   # Nemotron: extra's
            raise ValueError(f"{arch}: mlp_bias=True is not supported")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
        rope_theta, rope_scaling, rotary_dim = _rope(hf_config, extra.pop("rope_params", None), int(head_dim))
        bias = extra.pop("attention_bias", bool(getattr(hf_config, "attention_bias", False)))
        if arch in _QWEN2_ATTENTION:
            bias = bool(getattr(hf_config, "qkv_bias", True))
        max_pos = int(hf_config.max_position_embeddings)
        window = _sliding_window(hf_config, arch)
        if "layer_windows" not in extra and window is not None and window < max_pos:
            extra["layer_windows"] = layer_windows(hf_config, lambda i: True)   # by layer_types, else every layer
        return cls(
            architecture=arch,
            vocab_size=int(hf_config.vocab_size),
            hidden_size=int(hidden),
            intermediate_size=int(hf_config.intermediate_size),
            num_layers=int(hf_config.num_hidden_layers),
            num_heads=int(num_heads),
            num_kv_heads=int(num_kv_heads),
            head_dim=int(head_dim),
            rope_theta=float(rope_theta),
            rms_norm_eps=float(extra.pop("rms_norm_eps", None) or hf_config.rms_norm_eps),
            max_position_embeddings=max_pos,
            context_length=max_pos,
            rope_scaling=rope_scaling,
            rotary_dim=rotary_dim,
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            attention_bias=bias,
            o_proj_bias=extra.pop("o_proj_bias", bias if arch in _O_BIAS else False),
            qk_norm=extra.pop("qk_norm", arch in _QWEN3_ATTENTION),
            eos_token_ids=_eos_ids(hf_config, generation_config),
            sliding_window=window,
            moe=MoEConfig.from_hf(hf_config, arch) if arch in MOE_ARCHITECTURES else None,
            **extra,
        )


def _architecture(hf_config) -> str:
    archs = list(getattr(hf_config, "architectures", None) or [])
    if not archs:
        guess = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
                 "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", **MODEL_TYPES}
        model_type = getattr(hf_config, "model_type", None)
        archs = [guess[model_type]] if model_type in guess else [f"<model_type {model_type!r}>"]
    for arch in archs:
        if arch in SUPPORTED_ARCHITECTURES:
            return arch
    raise ValueError(f"unsupported model architecture {archs}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


def _text_config(hf_config, text_arch: str):
    """A multimodal config's text_config as `text_arch`'s config, with the top-level eos_token_id and
    tie_word_embeddings where set (HF's conditional-generation model ties and stops by those)."""
    text = copy.deepcopy(hf_config.text_config)
    text.architectures = [text_arch]
    for key in ("eos_token_id", "tie_word_embeddings"):
        if getattr(hf_config, key, None) is not None:
            setattr(text, key, getattr(hf_config, key))
    return text


def _rope(hf_config, params=None, head_dim=None):
    """-> (rope_theta, rope_scaling dict or None, rotary_dim or None) from v5 rope_parameters or v4
    rope_theta/rope_scaling.  params: the rope parameters to read instead (Gemma 3's full-attention layers)."""
    params = params if params is not None else getattr(hf_config, "rope_parameters", None)
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"unsupported rope_parameters {params!r}")
    params = dict(params or {})
    legacy = getattr(hf_config, "rope_scaling", None) if not params else None
    if legacy:
        params.update(legacy)
    if any(isinstance(v, Mapping) for v in params.values()):
        raise ValueError("per-layer-type rope parameters are not supported")
    theta = params.pop("rope_theta", None) or getattr(hf_config, "rope_theta", None) or 10000.0
    rotary_dim = _rotary_dim(hf_config, params, head_dim)
    rope_dim = rotary_dim or head_dim
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if rope_type in ("longrope", "su") and _architecture(hf_config) == "Phi3ForCausalLM":
        return theta, longrope_scaling(params, hf_config, rope_dim), rotary_dim
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"unsupported rope scaling type {rope_type!r}; supported: "
                         f"{', '.join(SUPPORTED_ROPE_TYPES)}")
    if rope_type == "yarn":
        return theta, yarn_scaling(params, hf_config, rope_dim), rotary_dim
    # HF's dynamic NTK rotates as the default one up to max_position_embeddings, where the context is capped
    if rope_type in ("default", "dynamic"):
        return theta, None, rotary_dim
    scaling = {"rope_type": rope_type, "factor": float(params["factor"])}
    if rope_type == "llama3":
        scaling["low_freq_factor"] = float(params["low_freq_factor"])
        scaling["high_freq_factor"] = float(params["high_freq_factor"])
        scaling["original_max_position_embeddings"] = int(
            params.get("original_max_position_embeddings") or hf_config.max_position_embeddings)
    return theta, scaling, rotary_dim


def _rotary_dim(hf_config, params, head_dim) -> Optional[int]:
    """The rotated dims of a head where the model rotates only the first ones (partial_rotary_factor), else None."""
    partial = params.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", None))
    if partial in (None, 1, 1.0):
        return None
    if _architecture(hf_config) not in PARTIAL_ROTARY_ARCHITECTURES:
        raise ValueError(f"partial rotary embeddings (factor {partial}) are not supported for "
                         f"{_architecture(hf_config)}")
    dim = int(head_dim * float(partial))
    if dim <= 0 or dim % 2:
        raise ValueError(f"partial_rotary_factor {partial} gives {dim} rotated dims of {head_dim}: need an even "
                         "number above 0")
    return dim


def _sliding_window(hf_config, arch):
    window = getattr(hf_config, "sliding_window", None)
    if arch in _USE_SLIDING_WINDOW and not getattr(hf_config, "use_sliding_window", False):
        return None
    return int(window) if window else None


def _eos_ids(hf_config, generation_config) -> tuple:
    ids = []
    sources = [getattr(hf_config, "eos_token_id", None)]
    if generation_config is not None:
        gen = generation_config
        sources.append(gen.get("eos_token_id") if isinstance(gen, Mapping) else getattr(gen, "eos_token_id", None))
    for src in sources:
        for i in ([src] if isinstance(src, int) else list(src or [])):
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return tuple(ids)
