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
"""

from dataclasses import dataclass
from typing import Any, Dict

from .layer_fields import layer_windows

MUSE_GLIMMER_TEXT = "MuseGlimmerTextForCausalLM"
MUSE_MODEL_TYPES = {"muse_glimmer_text": MUSE_GLIMMER_TEXT}
MUSE_TEXT_MODEL_TYPES = tuple(MUSE_MODEL_TYPES)   # whose image and video ids HF's text path embeds as id 0


@dataclass(frozen=True)
class MuseLayout:
    output_multiplier: float   # logits times this before the soft-cap
    post_norm_eps: float       # the post-attention and post-feed-forward norms' epsilon


def _muse_glimmer_text(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    act = getattr(hf_config, "hidden_activation", "silu")
    if act != "silu":
        raise ValueError(f"{arch}: hidden_activation {act!r} is not supported; only 'silu'")
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{arch}: rope_type {params['rope_type']!r} is not supported; only 'default'")
    thetas = [float(t) for t in (getattr(hf_config, "layer_rope_theta", None) or ())]
    if len(thetas) != n:
        raise ValueError(f"{arch}: layer_rope_theta must give one rope base (0: none) per layer, got {thetas}")
    cap = getattr(hf_config, "final_logit_softcapping", None)
    if not cap:
        raise ValueError(f"{arch}: final_logit_softcapping {cap!r} is not supported (HF divides the logits by it)")
    head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(head_dim=head_dim, hidden_act="silu", o_proj_bias=bias,
                attention_multiplier=float(hf_config.qk_scale_factor) * head_dim ** -0.5,
                layer_windows=layer_windows(hf_config, lambda i: (n - 1 - i) % 4 != 0),
                nope_layers=tuple(i for i, t in enumerate(thetas) if t == 0), final_softcap=float(cap),
                placeholders_as_pad=tuple(getattr(hf_config, "placeholders_as_pad", ())),
                muse=MuseLayout(float(hf_config.output_multiplier), float(hf_config.post_norm_eps)))


MUSE_FIELDS = {MUSE_GLIMMER_TEXT: _muse_glimmer_text}
