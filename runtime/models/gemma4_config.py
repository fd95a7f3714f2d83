"""Gemma 4's text fields (no torch): HF Gemma4ForCausalLM / Gemma4TextConfig, and the language model of
Gemma4ForConditionalGeneration (multimodal_text.py).

Per layer (Gemma4Layers): its type (layer_types: sliding or full attention), head dim and KV heads (full layers:
global_head_dim, and num_global_key_value_heads where attention_k_eq_v; transformers 5.25 keeps both in
per_layer_config instead), whether V is K (attention_k_eq_v on full layers: no v_proj), the KV pool layer it attends
over (the last num_kv_shared_layers layers store nothing and read the KV of the last earlier layer of their type),
its rope (rope_parameters per layer type: "default", or "proportional": the first partial_rotary_factor of each half
of the head turns, the rest stay), a double-wide MLP (use_double_wide_mlp, on the KV-reusing layers).  Model-wide:
the per-layer input embeddings (hidden_size_per_layer_input, vocab_size_per_layer_input) and the experts beside the
MLP (enable_moe_block: num_experts, top_k_experts, moe_intermediate_size).

The KV pool has one shape for every layer: the largest head dim and KV head count; a layer with fewer KV heads stores
each of them repeated, one with a smaller head dim zero-padded (gemma4_layers.py), which attention adds as zeros.
"""

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from .layer_fields import _gelu_tanh, layer_windows

GEMMA4_ARCHITECTURES = ("Gemma4ForCausalLM", "Gemma4UnifiedForCausalLM")   # Unified: no per-layer inputs, no experts
GEMMA4_MODEL_TYPES = {"gemma4_text": "Gemma4ForCausalLM", "gemma4_unified_text": "Gemma4UnifiedForCausalLM"}
SLIDING, FULL = "sliding_attention", "full_attention"
ROPE_TYPES = ("default", "proportional")


@dataclass(frozen=True)
class Gemma4Layers:
    layer_types: tuple       # per layer: SLIDING or FULL
    head_dims: tuple         # per layer: its head dim
    kv_heads: tuple          # per layer: its KV heads
    k_eq_v: tuple            # per layer: whether V is K (no v_proj)
    kv_source: tuple         # per layer: the KV pool layer it attends over (its own index where it stores)
    rope: tuple              # per layer: (rope_theta, rotated pairs of the head, factor)
    double_wide: tuple       # per layer: whether its MLP is twice intermediate_size wide
    per_layer_input: int     # hidden_size_per_layer_input (0: no per-layer inputs)
    per_layer_vocab: int     # vocab_size_per_layer_input
    num_experts: int = 0     # experts beside the MLP in every layer (0: none)
    top_k: int = 0
    expert_intermediate: int = 0

    @property
    def kv_layers(self) -> int:
        """The layers that store KV: all but the reusing ones, which come last."""
        return sum(src == i for i, src in enumerate(self.kv_source))

    def reuses_kv(self, layer_id: int) -> bool:
        return self.kv_source[layer_id] != layer_id


def gemma4_fields(arch: str, hf_config) -> dict:
    """ModelConfig.from_hf's fields: the activation, scores unscaled, the soft-cap, the windows, the sliding layers'
    rope as the model-wide one (each layer's own: Gemma4Layers.rope)."""
    if getattr(hf_config, "use_bidirectional_attention", None) not in (None, "vision"):
        raise ValueError(f"{arch}: use_bidirectional_attention {hf_config.use_bidirectional_attention!r} is not "
                         "supported (causal attention only; 'vision' is causal for text)")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    if getattr(hf_config, "per_layer_config", None) is not None:
        # transformers 5.25 refuses to read head_dim and num_key_value_heads model-wide (they vary per layer) unless
        # told: from_hf reads the sliding layers' values, with_gemma4 each layer's
        hf_config.allow_global_per_layer_attribute_access = True
    cap = getattr(hf_config, "final_logit_softcapping", None)
    return dict(hidden_act=_gelu_tanh(arch, hf_config), attention_multiplier=1.0,
                placeholders_as_pad=tuple(getattr(hf_config, "placeholders_as_pad", ())),
                final_softcap=float(cap) if cap else None,
                layer_windows=layer_windows(hf_config, lambda i: bool((i + 1) % 6)),
                rope_params={"rope_type": "default", "rope_theta": _rope_params(arch, hf_config, SLIDING)[0]})


def with_gemma4(config, hf_config):
    """ModelConfig `config` with its Gemma4Layers, the KV pool's head dim and KV heads the largest of any layer;
    ValueError naming the field for what the layers do not run."""
    arch, n = config.architecture, config.num_layers
    types = tuple(getattr(hf_config, "layer_types", None) or ())
    if len(types) != n or set(types) - {SLIDING, FULL}:
        raise ValueError(f"{arch}: layer_types must name {SLIDING!r} or {FULL!r} for each of the {n} layers")
    k_eq_v = bool(getattr(hf_config, "attention_k_eq_v", False))
    dims, heads = zip(*(_attention_shape(hf_config, i, t, k_eq_v) for i, t in enumerate(types)))
    max_heads = max(heads)
    if config.num_heads % max_heads or any(max_heads % h for h in heads):
        raise ValueError(f"{arch}: KV heads per layer {list(heads)} must each divide the largest, and it "
                         f"num_attention_heads {config.num_heads}")
    source = _kv_sources(arch, types, int(getattr(hf_config, "num_kv_shared_layers", 0) or 0))
    ropes = {t: _rope_params(arch, hf_config, t) for t in set(types)}
    double = bool(getattr(hf_config, "use_double_wide_mlp", False))
    layers = Gemma4Layers(
        layer_types=types, head_dims=dims, kv_heads=heads, k_eq_v=tuple(k_eq_v and t == FULL for t in types),
        kv_source=source, rope=tuple(_rope_of(ropes[t], d) for t, d in zip(types, dims)),
        double_wide=tuple(double and src != i for i, src in enumerate(source)),
        per_layer_input=int(getattr(hf_config, "hidden_size_per_layer_input", 0) or 0),
        per_layer_vocab=int(getattr(hf_config, "vocab_size_per_layer_input", 0) or 0), **_experts(arch, hf_config))
    if layers.per_layer_input and layers.per_layer_vocab < config.vocab_size:
        raise ValueError(f"{arch}: vocab_size_per_layer_input {layers.per_layer_vocab} is below vocab_size "
                         f"{config.vocab_size}")
    return dataclasses.replace(config, head_dim=max(dims), num_kv_heads=max_heads, gemma4=layers)


def _attention_shape(hf_config, layer_id: int, layer_type: str, k_eq_v: bool) -> tuple:
    """(head dim, KV heads) of one layer: transformers 5.25's per_layer_config, else the full layers' global_head_dim
    and (with attention_k_eq_v) num_global_key_value_heads, as transformers 5.5-5.17 read them."""
    dim, heads = int(hf_config.head_dim), int(hf_config.num_key_value_heads)
    entry = _per_layer_entry(getattr(hf_config, "per_layer_config", None), layer_id)
    if entry is not None:
        get = entry.get if isinstance(entry, Mapping) else lambda k: getattr(entry, k, None)
        return int(get("head_dim") or dim), int(get("num_key_value_heads") or heads)
    if getattr(hf_config, "per_layer_config", None) is not None or layer_type != FULL:
        return dim, heads
    global_heads = getattr(hf_config, "num_global_key_value_heads", None)
    return (int(getattr(hf_config, "global_head_dim", None) or dim),
            int(global_heads) if k_eq_v and global_heads else heads)


def _per_layer_entry(per_layer, layer_id: int):
    if per_layer is None:
        return None
    if isinstance(per_layer, Mapping):   # as config.json holds it: layer index strings
        return per_layer.get(str(layer_id), per_layer.get(layer_id))
    return per_layer[layer_id]


def _kv_sources(arch: str, types: tuple, shared: int) -> tuple:
    """Per layer, the KV pool layer it reads: its own, or for the last `shared` layers the last earlier layer of its
    type (HF's kv_sharing_modes "reuse" reading the "store" layer's)."""
    n = len(types)
    if not 0 <= shared < n:
        raise ValueError(f"{arch}: num_kv_shared_layers {shared} must be at least 0 and below num_hidden_layers {n}")
    first = n - shared
    last_of = {t: i for i, t in enumerate(types[:first])}
    if set(types[first:]) - set(last_of):
        raise ValueError(f"{arch}: num_kv_shared_layers {shared}: a shared layer's type has no earlier layer storing "
                         "its KV")
    return tuple(i if i < first else last_of[t] for i, t in enumerate(types))


def _rope_params(arch: str, hf_config, layer_type: str) -> tuple:
    """(rope_theta, partial_rotary_factor or None, factor, rope_type) of a layer type's rope_parameters."""
    params = (getattr(hf_config, "rope_parameters", None) or {}).get(layer_type)
    if not isinstance(params, Mapping):
        raise ValueError(f"{arch}: rope_parameters has no {layer_type!r} entry")
    kind = params.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise ValueError(f"{arch}: rope_parameters[{layer_type!r}] rope_type {kind!r} is not supported; supported: "
                         f"{', '.join(ROPE_TYPES)}")
    partial = params.get("partial_rotary_factor") if kind == "proportional" else None
    factor = float(params.get("factor", 1.0)) if kind == "proportional" else 1.0
    return float(params.get("rope_theta") or 10000.0), partial, factor, kind


def _rope_of(params: tuple, head_dim: int) -> tuple:
    """(rope_theta, rotated pairs, factor) of a layer of `head_dim`: HF's int(partial * head_dim // 2) pairs."""
    theta, partial, factor, _ = params
    pairs = head_dim // 2 if partial is None else int(float(partial) * head_dim // 2)
    return theta, pairs, factor


def _experts(arch: str, hf_config) -> dict:
    if not getattr(hf_config, "enable_moe_block", False):
        return {}
    values = {name: getattr(hf_config, name, None) for name in ("num_experts", "top_k_experts", "moe_intermediate_size")}
    if any(not v for v in values.values()):
        raise ValueError(f"{arch}: enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size, got "
                         f"{values}")
    experts, top_k, width = (int(v) for v in values.values())
    if top_k > experts:
        raise ValueError(f"{arch}: top_k_experts {top_k} is above num_experts {experts}")
    return dict(num_experts=experts, top_k=top_k, expert_intermediate=width)
