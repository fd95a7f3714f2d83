"""The Hugging Face config fields of Muse Glimmer's language model (HF MuseGlimmerTextModel, under
MuseGlimmerForConditionalGeneration served for text prompts: multimodal_wrappers.py) as ModelConfig fields
(family_config.py's contract).  No torch here.

Its layer (muse.py): Gemma 2's four (1 + weight) RMSNorms, the two after each sublayer at post_norm_eps; attention
with weightless per-head q/k RMSNorms, the query then times qk_scale_factor (folded into the score scale,
attention_multiplier = qk_scale_factor / sqrt(head_dim)), the output gated by sigmoid(gate_proj(x)) before o_proj;
sliding-window layers by layer_types; rope (the global rope_theta, as HF's single rotary embedding) only where
layer_rope_theta is not 0.  Embeddings are RMS-normalised without a weight; the final norm is a plain weighted
RMSNorm; the logits are times output_multiplier, then soft-capped by final_logit_softcapping.  HF's text path embeds
the image and video token ids as id 0 (placeholders_as_pad, set by multimodal_text.text_config).  Run by muse.py
under the name MUSE_GLIMMER_TEXT (HF has no causal LM class of it).

Muse Spark's (HF MuseSparkTextModel, muse_spark.py, MUSE_SPARK_TEXT): the same attention with each head's output
RMS-normalised without a weight before the gate; after each sublayer a norm (the attention's weightless, the MLP's
scaling by (1 + weight) before normalising) and a residual gate; the MLP dense or, in the sparse layers of
mlp_layer_types, num_local_experts experts of width moe_hidden_size between a projection in (then a (1 + weight)
RMSNorm) and one out, each expert's output through one shared input-scaled norm; a float32 router times
output_multiplier, sigmoid scores, the correction bias for the choice only, the top k renormalised, times
routed_scaling_factor.  Its audio ids are embedded as id 0 too; HF's model never ties its lm head.  Muse
Glimmer's ties by the top-level tie_word_embeddings, whatever text_config says (muse_ties).
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from .layer_fields import layer_windows

MUSE_GLIMMER_TEXT = "MuseGlimmerTextForCausalLM"
MUSE_SPARK_TEXT = "MuseSparkTextForCausalLM"
MUSE_MODEL_TYPES = {"muse_glimmer_text": MUSE_GLIMMER_TEXT, "muse_spark_text": MUSE_SPARK_TEXT}
MUSE_TEXT_MODEL_TYPES = tuple(MUSE_MODEL_TYPES)   # whose image and video ids HF's text path embeds as id 0


def muse_ties(text) -> bool:
    """Whether HF's conditional-generation model may tie the lm head of a Muse text_config: Glimmer's declares tied
    weights (and ties by the top-level tie_word_embeddings), Spark's none."""
    return text.model_type == "muse_glimmer_text"


@dataclass(frozen=True)
class MuseSparkMoE:
    sparse_layers: tuple   # the layers whose MLP is the experts
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    moe_hidden_size: int   # the experts' width, between pre_expert_proj and post_expert_proj
    routed_scaling_factor: float
    residual_gate_temperature: float


@dataclass(frozen=True)
class MuseLayout:
    output_multiplier: float   # logits (and Muse Spark's router logits) times this
    post_norm_eps: float       # the post-attention and post-feed-forward norms' epsilon
    spark: Optional[MuseSparkMoE] = None   # Muse Spark's experts and residual gates


def _muse_glimmer_text(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    name = "hidden_act" if arch == MUSE_SPARK_TEXT else "hidden_activation"
    act = getattr(hf_config, name, "silu")
    if act != "silu":
        raise ValueError(f"{arch}: {name} {act!r} is not supported; only 'silu'")
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{arch}: rope_type {params['rope_type']!r} is not supported; only 'default'")
    thetas = [float(t) for t in (getattr(hf_config, "layer_rope_theta", None) or ())]
    if len(thetas) != n:
        raise ValueError(f"{arch}: layer_rope_theta must give one rope base (0: none) per layer, got {thetas}")
    cap = getattr(hf_config, "final_logit_softcapping", None)
    if not cap:
        raise ValueError(f"{arch}: final_logit_softcapping {cap!r} is not supported (HF divides the logits by it)")
    if "sliding_attention" in (getattr(hf_config, "layer_types", None) or ()) and not hf_config.sliding_window:
        raise ValueError(f"{arch}: sliding_attention layers need a sliding_window (HF's cache cannot build them)")
    head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(head_dim=head_dim, hidden_act="silu", o_proj_bias=bias,
                attention_multiplier=float(hf_config.qk_scale_factor) * head_dim ** -0.5,
                layer_windows=layer_windows(hf_config, lambda i: (n - 1 - i) % 4 != 0),
                nope_layers=tuple(i for i, t in enumerate(thetas) if t == 0), final_softcap=float(cap),
                placeholders_as_pad=tuple(getattr(hf_config, "placeholders_as_pad", ())),
                muse=MuseLayout(float(hf_config.output_multiplier), float(hf_config.post_norm_eps),
                                _spark(arch, hf_config) if arch == MUSE_SPARK_TEXT else None))


def _spark(arch: str, hf_config) -> MuseSparkMoE:
    n, kinds = int(hf_config.num_hidden_layers), list(getattr(hf_config, "mlp_layer_types", None) or ())
    if len(kinds) != n or not set(kinds) <= {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {n} layers, "
                         f"got {kinds}")
    experts, top_k = int(hf_config.num_local_experts), int(hf_config.num_experts_per_tok)
    if not 0 < top_k <= experts:
        raise ValueError(f"{arch}: num_experts_per_tok {top_k} must be in 1..num_local_experts ({experts})")
    return MuseSparkMoE(tuple(i for i, k in enumerate(kinds) if k == "sparse"), experts, top_k,
                        int(hf_config.moe_intermediate_size), int(hf_config.moe_hidden_size),
                        float(hf_config.routed_scaling_factor), float(hf_config.residual_gate_temperature))


MUSE_FIELDS = {MUSE_GLIMMER_TEXT: _muse_glimmer_text, MUSE_SPARK_TEXT: _muse_glimmer_text}
