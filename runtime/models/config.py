"""ModelConfig: the numbers our model code needs, read once from a Hugging Face config.

No torch here: the scheduler and launcher read this too.  Supported architectures: SUPPORTED_ARCHITECTURES (the
README's "Model families" lists them; registry.py maps each to its class).  The Llama-shaped families (Llama, Mistral,
Qwen2/3 and their MoE relatives: moe_config.py) are read here; the others add their own fields through their modules:
family_config.py (with llama_like_config.py, moe_family_config.py, gpt_config.py, more_dense_config.py,
newer_moe_config.py and the per-family readers it registers), mla_config.py and dsa_config.py (latent and sparse
attention), llama4_config.py, linear_attention_config.py, mamba_config.py, nemotron_h_config.py, falcon_h1_config.py,
lfm2_config.py, gemma4_config.py and more_recurrent_config.py (the models with a recurrent state).  The language model
of a vision-language MULTIMODAL_TEXT_ARCHITECTURES checkpoint is read from its text_config (text prompts only:
multimodal_text.py).  A family's own layout (its layer kinds, recurrent state, shared or looped blocks) is a field of
FamilyLayouts (family_layouts.py), ModelConfig's base.
Anything else raises ValueError.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from radixlm.runtime.models.mla_config import MLA_ARCHITECTURES, MLA_MODEL_TYPES, MLAConfig, with_mla
from radixlm.runtime.models.moe_config import MOE_ARCHITECTURES, MoEConfig

from .alibi_config import alibi_view
from .dsa_config import SparseAttention
from .falcon_h1_config import with_falcon_h1
from .family_config import (
    FAMILY_ARCHITECTURES,
    MODEL_TYPES,
    family_fields,
    layer_windows,
    longrope_scaling,
    yarn_scaling,
)
from .family_layouts import FamilyLayouts
from .gemma4_config import GEMMA4_ARCHITECTURES, GEMMA4_MODEL_TYPES, gemma4_fields, with_gemma4
from .lfm2_config import LFM2_ARCHITECTURES, LFM2_MODEL_TYPES, lfm2_fields, with_lfm2
from .linear_attention_config import HYBRID_ARCHITECTURES, HYBRID_MODEL_TYPES, with_linear_attention
from .llama4_config import LLAMA4_ARCHITECTURES, LLAMA4_MODEL_TYPES, with_llama4
from .mamba_config import MAMBA2_ARCHITECTURES, MAMBA2_MODEL_TYPES, with_mamba2
from .moe_family_config import ARCHITECTURE_ALIASES
from .more_dense_config import with_differential_attention
from .more_recurrent_config import (
    MORE_RECURRENT_ARCHITECTURES,
    MORE_RECURRENT_MODEL_TYPES,
    hf_fields,
    with_more_recurrent,
)
from .multimodal_text import MULTIMODAL_TEXT_ARCHITECTURES, text_config
from .nemotron_h_config import with_nemotron_h
from .tied_head import ties_lm_head

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Ministral3ForCausalLM",
) + FAMILY_ARCHITECTURES + MULTIMODAL_TEXT_ARCHITECTURES + MLA_ARCHITECTURES + LLAMA4_ARCHITECTURES + HYBRID_ARCHITECTURES
SUPPORTED_ARCHITECTURES += MAMBA2_ARCHITECTURES
SUPPORTED_ARCHITECTURES += LFM2_ARCHITECTURES
SUPPORTED_ARCHITECTURES += GEMMA4_ARCHITECTURES
SUPPORTED_ARCHITECTURES += MORE_RECURRENT_ARCHITECTURES
# model_type -> architecture, for configs that name none (and for multimodal configs' text_config)
_MODEL_TYPE_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM", "ministral3": "Ministral3ForCausalLM", **MODEL_TYPES, **MLA_MODEL_TYPES,
    **LLAMA4_MODEL_TYPES, **HYBRID_MODEL_TYPES, **MAMBA2_MODEL_TYPES, **LFM2_MODEL_TYPES,
    **GEMMA4_MODEL_TYPES,
    **MORE_RECURRENT_MODEL_TYPES}
_QWEN2_ATTENTION = ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM")    # q/k/v bias, no o_proj bias
_QWEN3_ATTENTION = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")    # q/k norm, attention_bias on all four
_O_BIAS = ("LlamaForCausalLM", "GptOssForCausalLM") + _QWEN3_ATTENTION   # attention_bias covers o_proj too
_O_BIAS += ("GraniteForCausalLM", "SmolLM3ForCausalLM", "PhiForCausalLM", "CohereForCausalLM")
_USE_SLIDING_WINDOW = _QWEN2_ATTENTION + _QWEN3_ATTENTION + ("SmolLM3ForCausalLM",)  # window off unless switched on
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")
LONGROPE_ARCHITECTURES = ("Phi3ForCausalLM", "PhimoeForCausalLM", "MiniCPM3ForCausalLM")   # rope.py's LongRoPE
# whose HF model rotates only the first dims of each head
PARTIAL_ROTARY_ARCHITECTURES = ("Phi3ForCausalLM", "StableLmForCausalLM", "PhiForCausalLM", "Glm4ForCausalLM",
                                "Glm4MoeForCausalLM", "MiniMaxM2ForCausalLM") + HYBRID_ARCHITECTURES
PARTIAL_ROTARY_ARCHITECTURES += ("GlmForCausalLM", "NemotronForCausalLM", "BambaForCausalLM", "Mistral4ForCausalLM")
_LLAMA4_QUERY_SCALE = ("Ministral3ForCausalLM", "Mistral4ForCausalLM")   # HF reads llama_4_scaling_beta there only
# whose MLP (llama.py's gated one, llama_like.py's relu^2) takes HF's mlp_bias on every projection
_MLP_BIAS = ("LlamaForCausalLM", "GraniteForCausalLM", "SmolLM3ForCausalLM", "SeedOssForCausalLM", "HeliumForCausalLM",
             "ArceeForCausalLM")


@dataclass(frozen=True)
class ModelConfig(FamilyLayouts):
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
    num_heads: int                   # the attention kernels' heads (DiffLlama: twice the checkpoint's, two maps each)
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
    local_rotary_dim: Optional[int] = None    # Laguna: the sliding layers' rotated dims (None: rotary_dim's)
    gate_per_head: bool = True       # Laguna: one softplus output gate per head, else one per head dim
    logit_scale: Optional[float] = None  # Cohere: logits multiplied by it
    moe: Optional[MoEConfig] = None  # mixture-of-experts models only
    embedding_multiplier: float = 1.0     # Granite: embeddings times this
    residual_multiplier: float = 1.0      # Granite: each sublayer's output times this before it joins the residual
    attention_multiplier: Optional[float] = None  # Granite: the score scale itself, instead of head_dim ** -0.5
    logits_scaling: float = 1.0           # Granite: logits divided by this
    nope_layers: tuple = ()               # SmolLM3: layers whose q and k get no rotary embedding
    layer_rope_thetas: tuple = ()         # GraniteSWA: each layer's rope base (0: in nope_layers); (): rope_theta
    mlp_bias: bool = False           # biases on every MLP projection: StarCoder2 (use_bias), Nemotron, _MLP_BIAS
    parallel_residual: bool = False  # StableLM: attention and MLP both read the input norm's output
    sublayer_post_norms: bool = False  # HyperCLOVA X: each sublayer's output RMSNormed before it joins the residual
    clip_qkv: Optional[float] = None  # OLMo: q, k and v clamped to [-clip_qkv, clip_qkv] after their projection
    mla: Optional[MLAConfig] = None  # DeepSeek-V2/V3, GLM-4.7-Flash (mla_config.py): head_dim is the cached width
    dsa: Optional[SparseAttention] = None  # DeepSeek-V3.2, GLM-5, A.X K2 (dsa_config.py): context <= index_topk
    language_model: Optional[str] = None  # a multimodal checkpoint served for text: its language model's architecture
    # Ministral 3: (beta, original_max_position_embeddings); queries times 1 + beta * log(1 + floor(position / it))
    query_scale: Optional[tuple] = None

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def kv_v_is_k(self) -> bool:
        """Whether the KV pool's V is its K (MLA caches one vector per token and layer): KVPool's v_is_k."""
        return self.mla is not None

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
            text = cls.from_hf(text_config(hf_config, _MODEL_TYPE_ARCHITECTURES), generation_config)
            return dataclasses.replace(text, architecture=arch, language_model=text.architecture)
        extra = family_fields(arch, hf_config) if arch in FAMILY_ARCHITECTURES else {}
        hf_config = hf_fields(arch, alibi_view(arch, hf_config))
        if arch in LFM2_ARCHITECTURES:
            extra = lfm2_fields(hf_config, arch)
        if arch in GEMMA4_ARCHITECTURES:
            extra = gemma4_fields(arch, hf_config)
        hidden = hf_config.hidden_size
        num_heads = hf_config.num_attention_heads
        num_kv_heads = extra.pop("num_kv_heads", None) or getattr(hf_config, "num_key_value_heads", None) or num_heads
        head_dim = extra.pop("head_dim", None) or getattr(hf_config, "head_dim", None) or hidden // num_heads
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
        rotary_dim = extra.pop("rotary_dim", rotary_dim)   # GPT-J, GPT-NeoX: their own fields
        bias = extra.pop("attention_bias", bool(getattr(hf_config, "attention_bias", False)))
        if arch in _QWEN2_ATTENTION:
            bias = bool(getattr(hf_config, "qkv_bias", True))
        max_pos = int(hf_config.max_position_embeddings)
        window = _sliding_window(hf_config, arch)
        if "layer_windows" not in extra and window is not None and window < max_pos:
            extra["layer_windows"] = layer_windows(hf_config, lambda i: True)   # by layer_types, else every layer
        config = cls(
            architecture=arch,
            vocab_size=int(hf_config.vocab_size),
            hidden_size=int(hidden),
            intermediate_size=int(extra.pop("intermediate_size", None) or getattr(hf_config, "intermediate_size", None)
                                  or hf_config.moe_intermediate_size),   # Qwen3.5-MoE: experts on every layer
            num_layers=int(extra.pop("num_layers", None) or hf_config.num_hidden_layers),   # Dory: its KV layers
            num_heads=int(num_heads),
            num_kv_heads=int(num_kv_heads),
            head_dim=int(head_dim),
            rope_theta=float(rope_theta),
            rms_norm_eps=float(extra.pop("rms_norm_eps", None) or _rms_norm_eps(hf_config)),
            max_position_embeddings=max_pos,
            context_length=max_pos,
            rope_scaling=rope_scaling,
            rotary_dim=rotary_dim,
            tie_word_embeddings=ties_lm_head(arch, hf_config),
            attention_bias=bias,
            o_proj_bias=extra.pop("o_proj_bias", bias if arch in _O_BIAS else False),
            qk_norm=extra.pop("qk_norm", arch in _QWEN3_ATTENTION),
            eos_token_ids=_eos_ids(hf_config, generation_config),
            sliding_window=window,
            moe=MoEConfig.from_hf(hf_config, arch) if arch in MOE_ARCHITECTURES else None,
            query_scale=_query_scale(hf_config, arch),
            **extra,
        )
        if arch in LLAMA4_ARCHITECTURES:
            return with_llama4(config, hf_config)
        if arch in HYBRID_ARCHITECTURES:
            return with_linear_attention(config, hf_config)
        if arch == "NemotronHForCausalLM":
            return with_nemotron_h(config, hf_config)
        if arch == "FalconH1ForCausalLM":
            return with_falcon_h1(config, hf_config)
        if arch in MAMBA2_ARCHITECTURES:
            return with_mamba2(config, hf_config)
        if arch == "DiffLlamaForCausalLM":
            return with_differential_attention(config)
        if arch in LFM2_ARCHITECTURES:
            return with_lfm2(config, hf_config)
        if arch in GEMMA4_ARCHITECTURES:
            return with_gemma4(config, hf_config)
        if arch in MORE_RECURRENT_ARCHITECTURES:
            return with_more_recurrent(config, hf_config)
        return with_mla(config, hf_config) if arch in MLA_ARCHITECTURES else config


def model_type_of(architectures) -> Optional[str]:
    """The transformers model_type of the first of `architectures` we serve (None when none is): the config class
    that reads a checkpoint whose own model_type needs remote code (Kimi K2's "kimi_k2" is DeepSeek-V3's layout)."""
    for arch in architectures or ():
        for model_type, served in _MODEL_TYPE_ARCHITECTURES.items():
            if served == arch:
                return model_type
    return None


def _architecture(hf_config) -> str:
    archs = [ARCHITECTURE_ALIASES.get(a, a) for a in getattr(hf_config, "architectures", None) or []]
    if not archs:
        model_type = getattr(hf_config, "model_type", None)
        archs = [_MODEL_TYPE_ARCHITECTURES.get(model_type, f"<model_type {model_type!r}>")]
    for arch in archs:
        if arch in SUPPORTED_ARCHITECTURES:
            return arch
    raise ValueError(f"unsupported model architecture {archs}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


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
    if rope_type in ("longrope", "su") and _architecture(hf_config) in LONGROPE_ARCHITECTURES:
        mscales = _architecture(hf_config) == "PhimoeForCausalLM"
        return theta, longrope_scaling(params, hf_config, rope_dim, mscales), rotary_dim
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


def _rms_norm_eps(hf_config) -> float:
    """rms_norm_eps, or layer_norm_epsilon where the config names it so (Nemotron-H)."""
    eps = getattr(hf_config, "rms_norm_eps", None)
    return eps if eps is not None else hf_config.layer_norm_epsilon


def _sliding_window(hf_config, arch):
    window = getattr(hf_config, "sliding_window", None)
    if arch in _USE_SLIDING_WINDOW and not getattr(hf_config, "use_sliding_window", False):
        return None
    return int(window) if window else None


def _query_scale(hf_config, arch) -> Optional[tuple]:
    """Ministral 3's and Mistral 4's Llama 4 query scaling, (llama_4_scaling_beta, original_max_position_embeddings)
    of their rope parameters, or None (no beta, or another architecture: HF reads them only there)."""
    params = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    if arch not in _LLAMA4_QUERY_SCALE or not params.get("llama_4_scaling_beta"):
        return None
    original = params.get("original_max_position_embeddings")
    if not original or int(original) <= 0:
        raise ValueError(f"{arch}: rope_parameters' llama_4_scaling_beta needs a positive "
                         f"original_max_position_embeddings there, got {original!r}")
    return float(params["llama_4_scaling_beta"]), int(original)


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
