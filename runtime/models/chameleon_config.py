"""The Hugging Face config fields of Chameleon (HF ChameleonForConditionalGeneration, served for text prompts) as
ModelConfig fields (family_config.py's contract).  No torch here.

Its text path is Llama's layer (pre-norm, or with swin_norm each sublayer's output normalised before it joins the
residual) with q/k LayerNorms per head, each head its own weight and bias, their epsilon 1e-5 whatever rms_norm_eps
says, before rope; heads of hidden_size / num_attention_heads.  Its image tokens are vocabulary ids (vocabulary_map's
IMGIMG* names), whose logits HF sets to the float minimum: config.chameleon.image_tokens.
"""

from dataclasses import dataclass
from typing import Any, Dict, Tuple

CHAMELEON = "ChameleonForConditionalGeneration"
CHAMELEON_MODEL_TYPES = {"chameleon": CHAMELEON}


@dataclass(frozen=True)
class ChameleonLayout:
    image_tokens: Tuple[int, ...]   # ids whose logits are the float minimum
    swin_norm: bool                 # x + norm(attn(x)), then x + norm(mlp(x)): no pre-norms


def _chameleon(arch: str, hf_config) -> Dict[str, Any]:
    vocab, names = int(hf_config.vocab_size), getattr(hf_config, "vocabulary_map", None) or {}
    image = tuple(sorted(int(i) for name, i in names.items() if name.startswith("IMGIMG")))
    if any(not 0 <= i < vocab for i in image):
        raise ValueError(f"{arch}: vocabulary_map's image tokens must be ids of the {vocab}-token vocabulary")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(head_dim=int(hf_config.hidden_size) // int(hf_config.num_attention_heads), qk_norm=True,
                o_proj_bias=bias, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
                chameleon=ChameleonLayout(image, bool(getattr(hf_config, "swin_norm", False))))


CHAMELEON_FIELDS = {CHAMELEON: _chameleon}
