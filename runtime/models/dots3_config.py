"""Dots 3 Note's text model (HF Dots3NoteForCausalLM), as ModelConfig fields (family_config.py's contract, and
more_recurrent_config.hf_fields' view of its per-layer fields).  No torch here.

DeepSeek-V3.2's layers whose attention shapes differ by layer type (per_layer_config): "indexed_attention" layers
(the lightning indexer, which within index_topk tokens keeps every token, so dense MLA is exact: dsa_config.py) and
"sliding_attention" layers (window sliding_window), each with its own heads, ranks and head dims, and its own rope
(rope_parameters by layer type).  Each layer's MLA (mla.py) also scales its normed q and kv latents by
sqrt(hidden / rank), RMSNorms its rope key before rotating it, and gates each head's output by sigmoid(g_proj(x)).
The KV pool holds one width for every layer: the widest layer's qk_rope_head_dim + kv_lora_rank, the narrower ones'
tokens zero-padded (zeros add nothing to a score; the padding read back is dropped).  Experts as DeepSeek-V3's,
with shared experts of shared_experts_intermediate_size each (moe_config.py).
"""

from dataclasses import dataclass

from .dsa_config import SparseAttention
from .mamba_stack_config import FieldsView
from .mla_config import MLAConfig

_TYPES = ("indexed_attention", "sliding_attention", "full_attention")


@dataclass(frozen=True)
class Dots3Layers:
    heads: tuple            # per layer: its query heads
    shapes: tuple           # per layer: its MLAConfig


def _layers(arch: str, hf_config) -> Dots3Layers:
    heads, shapes = [], []
    for i in range(int(hf_config.num_hidden_layers)):
        layer = hf_config.per_layer_config[i]
        if not layer.q_lora_rank:
            raise ValueError(f"{arch}: layer {i} without q_lora_rank is not supported")
        heads.append(int(layer.num_attention_heads))
        shapes.append(MLAConfig(q_lora_rank=int(layer.q_lora_rank), kv_lora_rank=int(layer.kv_lora_rank),
                                qk_nope_head_dim=int(layer.qk_nope_head_dim),
                                qk_rope_head_dim=int(layer.qk_rope_head_dim), v_head_dim=int(layer.v_head_dim),
                                rope_interleave=True))
    return Dots3Layers(tuple(heads), tuple(shapes))


def _ropes(arch: str, hf_config, types: list, rope_dim: int) -> dict:
    """Each layer type's rope base; ValueError where its rope is not the default one over qk_rope_head_dim dims."""
    bases = {}
    for kind in set(types):
        params = dict(hf_config.rope_parameters[kind] or {})
        head_dim = int(hf_config.per_layer_config[types.index(kind)].head_dim)
        dims = int(head_dim * float(params.get("partial_rotary_factor", 1.0)))   # as HF's rope reads it
        if (params.get("rope_type") or "default") != "default" or dims != rope_dim:
            raise ValueError(f"{arch}: rope_parameters[{kind!r}] {params!r} are not supported; only the default rope "
                             f"over qk_rope_head_dim ({rope_dim}) dims")
        bases[kind] = float(params.get("rope_theta") or 10000.0)
    return bases


def _dots3(arch: str, hf_config) -> dict:
    types = list(hf_config.layer_types)
    if set(types) - set(_TYPES) or len(types) != int(hf_config.num_hidden_layers):
        raise ValueError(f"{arch}: layer_types {types!r} are not supported; supported: {', '.join(_TYPES)}")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    layers = _layers(arch, hf_config)
    rope_dim = layers.shapes[0].qk_rope_head_dim
    if {m.qk_rope_head_dim for m in layers.shapes} != {rope_dim}:
        raise ValueError(f"{arch}: qk_rope_head_dim differing by layer type is not supported")
    bases = _ropes(arch, hf_config, types, rope_dim)
    window = int(hf_config.sliding_window or 0)
    full = next((t for t in types if t != "sliding_attention"), "sliding_attention")
    fields = dict(head_dim=max(m.cache_dim for m in layers.shapes), num_kv_heads=1, rotary_dim=rope_dim,
                  local_rotary_dim=rope_dim, attention_multiplier=layers.shapes[0].qk_head_dim ** -0.5,
                  mla=layers.shapes[0], dots3=layers,
                  rope_params={"rope_type": "default", "rope_theta": bases[full]},
                  local_rope_theta=bases.get("sliding_attention"),
                  layer_windows=tuple(window if t == "sliding_attention" else None for t in types))
    if "indexed_attention" in types:
        indexed = tuple(i for i, t in enumerate(types) if t == "indexed_attention")
        fields["dsa"] = SparseAttention(index_topk=int(hf_config.index_topk), index_n_heads=int(hf_config.index_n_heads),
                                        index_head_dim=int(hf_config.index_head_dim), indexer_layers=indexed)
    return fields


def dots3_view(hf_config) -> FieldsView:
    """The config as from_hf reads its common fields: the most query heads of any layer, the context capped at
    index_topk where a layer has an indexer (dsa_config.py)."""
    layers = _layers("Dots3NoteForCausalLM", hf_config)
    max_pos = int(hf_config.max_position_embeddings)
    if "indexed_attention" in list(hf_config.layer_types):
        max_pos = min(max_pos, int(hf_config.index_topk))
    first = hf_config.per_layer_config[0]
    return FieldsView(hf_config, dict(num_attention_heads=max(layers.heads), num_key_value_heads=1,
                                      max_position_embeddings=max_pos, q_lora_rank=first.q_lora_rank,
                                      kv_lora_rank=first.kv_lora_rank, qk_nope_head_dim=first.qk_nope_head_dim,
                                      qk_rope_head_dim=first.qk_rope_head_dim, v_head_dim=first.v_head_dim))


DOTS3_FIELDS = {"Dots3NoteForCausalLM": _dots3}
DOTS3_MODEL_TYPES = {"dots3_note_text": "Dots3NoteForCausalLM"}
