"""Gemma 3n's text fields (no torch): HF Gemma3nForCausalLM / Gemma3nTextConfig, and the language model of
Gemma3nForConditionalGeneration (multimodal_text.py).

Its attention is Gemma 4's (gemma4_config.py's Gemma4Layers: sliding and full layers, one head dim and KV head count,
the last num_kv_shared_layers layers reading the KV of the last earlier layer of their type, per-layer inputs); its
own (Gemma3nLayers): AltUp's parallel residual streams (altup_num_inputs, the active one altup_active_idx, its
correction scaled where altup_correct_scale), LAuReL's low-rank residual (laurel_rank), an MLP width per layer
(intermediate_size as a list) and the gaussian top-k activation sparsity of the layers where
activation_sparsity_pattern is above 0.

Refused (ValueError naming the field): rope types other than "default" (HF's proportional rope reads Gemma 4's
per_layer_config, which Gemma 3n has not), attention biases, an active stream out of range, sparsity outside [0, 1),
no per-layer inputs (hidden_size_per_layer_input 0).
"""

from dataclasses import dataclass
from typing import Any, Dict

from .gemma4_config import Gemma4Layers, _kv_sources, gemma4_fields

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class HardTokens:
    """One of Gemma3nForConditionalGeneration's multimodal embedders (embed_vision, embed_audio), which embeds the
    token ids [offset, end) in place of the text embeddings: row id - offset of its table [rows, width], RMSNormed
    (weight), projected to the hidden size, RMSNormed without weight; its eps."""
    name: str
    offset: int
    end: int
    rows: int
    width: int
    eps: float


@dataclass(frozen=True)
class Gemma3nLayers:
    altup_inputs: int          # AltUp's parallel residual streams
    altup_active: int          # the stream the layers compute on
    altup_correct_scale: bool  # the active stream's correction times correct_output_scale before the per-layer input
    laurel_rank: int           # LAuReL's low-rank width
    intermediate: tuple        # per layer: its MLP width
    sparsity: tuple            # per layer: the gaussian top-k target sparsity of its MLP gate (0.0: dense)
    hard_tokens: tuple = ()    # the multimodal checkpoint's HardTokens (text ids past their offsets: none)


def _gemma3n(arch: str, hf_config) -> Dict[str, Any]:
    """ModelConfig.from_hf's fields: Gemma 4's (activation, unscaled scores, soft-cap, windows) with its
    Gemma4Layers, and the Gemma3nLayers."""
    n = int(hf_config.num_hidden_layers)
    types = tuple(getattr(hf_config, "layer_types", None) or ())
    if len(types) != n or set(types) - {SLIDING, FULL}:
        raise ValueError(f"{arch}: layer_types must name {SLIDING!r} or {FULL!r} for each of the {n} layers")
    rope = {t: _default_rope(arch, hf_config, t) for t in set(types)}
    head_dim, kv_heads = int(hf_config.head_dim), int(hf_config.num_key_value_heads)
    attention = Gemma4Layers(
        layer_types=types, head_dims=(head_dim,) * n, kv_heads=(kv_heads,) * n, k_eq_v=(False,) * n,
        kv_source=_kv_sources(arch, types, int(getattr(hf_config, "num_kv_shared_layers", 0) or 0)),
        rope=tuple((rope[t], head_dim // 2, 1.0) for t in types), double_wide=(False,) * n,
        per_layer_input=int(hf_config.hidden_size_per_layer_input or 0),
        per_layer_vocab=int(hf_config.vocab_size_per_layer_input or 0))
    widths = hf_config.intermediate_size
    widths = tuple(int(w) for w in (widths if isinstance(widths, (list, tuple)) else [widths] * n))
    sparsity = tuple(float(s) for s in hf_config.activation_sparsity_pattern)
    if len(widths) != n or len(sparsity) != n or not all(0.0 <= s < 1.0 for s in sparsity):
        raise ValueError(f"{arch}: intermediate_size and activation_sparsity_pattern need one value per layer, the "
                         f"sparsity in [0, 1); got {widths}, {sparsity}")
    if attention.per_layer_input < 1:
        raise ValueError(f"{arch}: hidden_size_per_layer_input {attention.per_layer_input} is not supported (at least 1)")
    streams, active = int(hf_config.altup_num_inputs), int(hf_config.altup_active_idx)
    if not 0 <= active < streams:
        raise ValueError(f"{arch}: altup_active_idx {active} is not one of the {streams} altup_num_inputs streams")
    layers = Gemma3nLayers(altup_inputs=streams, altup_active=active,
                           altup_correct_scale=bool(hf_config.altup_correct_scale),
                           laurel_rank=int(hf_config.laurel_rank), intermediate=widths, sparsity=sparsity,
                           hard_tokens=tuple(getattr(hf_config, "hard_tokens", ())))
    return dict(gemma4_fields(arch, hf_config), gemma4=attention, gemma3n=layers, intermediate_size=max(widths))


def _default_rope(arch: str, hf_config, layer_type: str) -> float:
    params = (getattr(hf_config, "rope_parameters", None) or {}).get(layer_type) or {}
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{arch}: rope_parameters[{layer_type!r}] rope_type {params.get('rope_type')!r} is not "
                         "supported; only 'default'")
    return float(params.get("rope_theta") or 10000.0)


def with_hard_tokens(text, hf_config) -> None:
    """Gemma3nForConditionalGeneration's text_config `text` told of its vision and audio embedders (HardTokens):
    HF embeds the ids from vision_config's vocab_offset to audio_config's by embed_vision, those from there on by
    embed_audio."""
    vision, audio = hf_config.vision_config, hf_config.audio_config
    bounds = (("embed_vision", vision, int(audio.vocab_offset)), ("embed_audio", audio, int(text.vocab_size)))
    text.hard_tokens = tuple(HardTokens(name, int(mm.vocab_offset), max(end, int(mm.vocab_offset)),
                                        int(mm.vocab_size), int(mm.hidden_size), float(mm.rms_norm_eps))
                             for name, mm, end in bounds if int(mm.vocab_offset) < int(text.vocab_size))


GEMMA3N_FIELDS = {"Gemma3nForCausalLM": _gemma3n}
GEMMA3N_MODEL_TYPES = {"gemma3n_text": "Gemma3nForCausalLM"}
