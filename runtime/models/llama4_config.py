"""Llama 4's own config fields (Llama4TextConfig, Scout and Maverick), read once into ModelConfig (no torch here).

  no_rope_layers[i]: 1 where layer i rotates q and k, 0 for a NoPE layer (ModelConfig.nope_layers).
  layer_types: "chunked_attention" layers (by default the rope layers, where attention_chunk_size is set) attend
    only within their chunk: the token at position p sees keys at p // attention_chunk_size * chunk .. p.
  use_qk_norm: q and k of the rope layers L2-normalised after rope (a weightless RMSNorm over head_dim).
  attn_temperature_tuning: queries of the NoPE layers times 1 + attn_scale * log(1 + floor((p + 1) / floor_scale)).
  moe_layers (default every interleave_moe_layer_step-th layer): top-k experts of width intermediate_size with
    sigmoid scores that scale each expert's input, plus a shared expert of the same width; the dense layers' MLP
    has width intermediate_size_mlp.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .moe_config import MoEConfig

LLAMA4_ARCHITECTURES = ("Llama4ForCausalLM",)
LLAMA4_MODEL_TYPES = {"llama4_text": "Llama4ForCausalLM"}
_LAYER_TYPES = ("full_attention", "chunked_attention")


@dataclass(frozen=True)
class Llama4Attention:
    chunk_size: Optional[int]          # attention_chunk_size of the chunked layers (None: no chunked layer)
    chunked_layers: tuple              # layers attending within their chunk
    qk_l2_norm_layers: tuple           # layers whose q and k are L2-normalised after rope
    temperature: Optional[tuple]       # (floor_scale, attn_scale) of the NoPE layers' query scaling; None: off


def with_llama4(config, hf_config):
    """ModelConfig `config` (read by config.py as a Llama) with Llama 4's fields; ValueError naming a field whose
    value we cannot run."""
    arch, n = config.architecture, config.num_layers
    use_rope = list(getattr(hf_config, "no_rope_layers", None) or [])
    if len(use_rope) < n:
        raise ValueError(f"{arch}: no_rope_layers has {len(use_rope)} entries for {n} layers")
    rope_layers = tuple(i for i in range(n) if use_rope[i])
    types = list(getattr(hf_config, "layer_types", None) or [])
    if len(types) < n or any(t not in _LAYER_TYPES for t in types[:n]):
        raise ValueError(f"{arch}: layer_types {types!r} must give one of {_LAYER_TYPES} for each of {n} layers")
    chunked = tuple(i for i in range(n) if types[i] == "chunked_attention")
    chunk = getattr(hf_config, "attention_chunk_size", None)
    if chunked and (not chunk or int(chunk) <= 0):
        raise ValueError(f"{arch}: chunked_attention layers need a positive attention_chunk_size, got {chunk!r}")
    temperature = None
    if getattr(hf_config, "attn_temperature_tuning", False):
        floor_scale = float(hf_config.floor_scale)
        if floor_scale <= 0:
            raise ValueError(f"{arch}: floor_scale must be positive for attn_temperature_tuning, got {floor_scale}")
        temperature = (floor_scale, float(hf_config.attn_scale))
    attention = Llama4Attention(
        chunk_size=int(chunk) if chunked else None, chunked_layers=chunked,
        qk_l2_norm_layers=rope_layers if getattr(hf_config, "use_qk_norm", False) else (),
        temperature=temperature)
    return dataclasses.replace(
        config, intermediate_size=int(hf_config.intermediate_size_mlp), o_proj_bias=config.attention_bias,
        nope_layers=tuple(i for i in range(n) if i not in rope_layers), moe=_moe(hf_config, arch, n),
        llama4=attention)


def _moe(hf_config, arch: str, num_layers: int) -> MoEConfig:
    sparse = tuple(int(i) for i in hf_config.moe_layers)
    if any(not 0 <= i < num_layers for i in sparse):
        raise ValueError(f"{arch}: moe_layers {list(sparse)} must be layer indices below {num_layers}")
    experts, top_k, inter = int(hf_config.num_local_experts), int(hf_config.num_experts_per_tok), \
        int(hf_config.intermediate_size)
    if not 1 <= top_k <= experts:
        raise ValueError(f"{arch}: num_experts_per_tok {top_k} must be in 1..{experts} (num_local_experts)")
    return MoEConfig(num_experts=experts, top_k=top_k, intermediate_size=inter, norm_topk_prob=False,
                     sparse_layers=sparse, shared_expert_intermediate_size=inter, shared_expert_gate=False,
                     scoring="sigmoid")
