"""The Hugging Face config fields of the ModernBERT decoder (ModernBertDecoderForCausalLM, model_type
"modernbert-decoder": the Ettin decoders), as ModelConfig fields (family_config.py's contract).  No torch here.

Its layers are pre-norm LayerNorms (bias by norm_bias; layer 0 has no attention norm), q/k/v/o with attention_bias, a
GeGLU-style MLP Wi -> act(input) * gate -> Wo with mlp_bias, and full or sliding-window attention by layer_types
(HF's default: every global_attn_every_n_layers-th layer from 0 full).  HF's sliding window is local_attention // 2
tokens, the query's own included.  The full layers rotate at rope_parameters["full_attention"]'s base (HF's default
160000), the sliding ones at rope_parameters["sliding_attention"]'s (10000).  The embeddings are LayerNormed; the
head is dense (classifier_bias) -> classifier_activation -> LayerNorm, then the decoder with decoder_bias, tied to
the embeddings where tie_word_embeddings.  Dropouts are training-only; the default rope alone is run.
"""

from dataclasses import dataclass
from typing import Any, Dict, Mapping

from .decoder_config import activation

MODERNBERT_MODEL_TYPES = {"modernbert-decoder": "ModernBertDecoderForCausalLM"}
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class ModernBertLayout:
    """norm_bias: every LayerNorm's bias; head_act: the head's activation (gpt_layers.ACTIVATIONS); head_bias: the
    head's dense bias (classifier_bias); decoder_bias: the lm head's bias."""

    norm_bias: bool = False
    head_act: str = "gelu"
    head_bias: bool = False
    decoder_bias: bool = True


def _windows(arch: str, hf_config) -> tuple:
    """Per layer: HF's sliding window (its config's sliding_window, local_attention // 2 unless config.json names
    another) or None (full attention)."""
    n = int(hf_config.num_hidden_layers)
    types = list(hf_config.layer_types or [])
    if len(types) != n or set(types) - set(LAYER_TYPES):
        raise ValueError(f"{arch}: unsupported layer_types {types!r}; one of {LAYER_TYPES} per layer")
    local = getattr(hf_config, "local_attention", None)
    window = getattr(hf_config, "sliding_window", None)
    window = int(local) // 2 if window is None and local else window
    if "sliding_attention" in types and (not window or int(window) < 1):
        raise ValueError(f"{arch}: local_attention={local!r} (sliding_window={window!r}) leaves the sliding layers "
                         "no window (HF's window is local_attention // 2 >= 1)")
    return tuple(int(window) if t == "sliding_attention" else None for t in types)


def _rope(arch: str, hf_config) -> Dict[str, Any]:
    """The full layers' rope base (rope_params) and the sliding layers' (local_rope_theta); default rope only."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    thetas = {}
    for kind, default in (("full_attention", 160_000.0), ("sliding_attention", 10_000.0)):
        p = params.get(kind) or {}
        if not isinstance(p, Mapping) or (p.get("rope_type") or "default") != "default":
            raise ValueError(f"{arch}: rope_parameters[{kind!r}]={p!r} is not supported; only the default rope is")
        thetas[kind] = float(p.get("rope_theta") or default)
    return dict(rope_params={"rope_type": "default", "rope_theta": thetas["full_attention"]},
                local_rope_theta=thetas["sliding_attention"])


def _modernbert_decoder(arch: str, hf_config) -> Dict[str, Any]:
    hidden, heads = int(hf_config.hidden_size), int(hf_config.num_attention_heads)
    head_dim = getattr(hf_config, "head_dim", None)
    if hidden % heads or (head_dim is not None and int(head_dim) != hidden // heads):
        raise ValueError(f"{arch}: heads of hidden_size / num_attention_heads dims only (head_dim={head_dim!r}, "
                         f"hidden_size={hidden}, num_attention_heads={heads})")
    layout = ModernBertLayout(norm_bias=bool(hf_config.norm_bias),
                              head_act=activation(arch, hf_config.classifier_activation, "classifier_activation"),
                              head_bias=bool(hf_config.classifier_bias), decoder_bias=bool(hf_config.decoder_bias))
    bias = bool(hf_config.attention_bias)
    return dict(_rope(arch, hf_config), layer_windows=_windows(arch, hf_config), modernbert=layout,
                hidden_act=activation(arch, hf_config.hidden_activation, "hidden_activation"),
                rms_norm_eps=float(hf_config.norm_eps), attention_bias=bias, o_proj_bias=bias,
                mlp_bias=bool(hf_config.mlp_bias), num_kv_heads=heads, head_dim=hidden // heads)


MODERNBERT_FIELDS = {"ModernBertDecoderForCausalLM": _modernbert_decoder}
