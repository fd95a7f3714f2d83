"""Google RecurrentGemma's fields (no torch; HF RecurrentGemmaForCausalLM, Griffin).  Layers follow block_types in
turn: "recurrent" layers run an RG-LRU block (recurrent_gemma.py: linear_y through gelu-tanh, times linear_x through
a causal depthwise convolution of conv1d_width (with a bias, no activation) and the real-gated linear recurrent unit
of lru_width channels in num_attention_heads blocks); "attention" layers run local multi-query attention over the
last attention_window_size keys, the first head_dim x partial_rotary_factor dims of each head rotated, an o_proj
bias.  Every layer then has a gelu-tanh gated MLP of intermediate_size / 2 with biases; norms are (1 + weight)
RMSNorms; embeddings are scaled by sqrt(hidden_size) rounded to bfloat16; logits soft-capped at logits_soft_cap.
The configs name no position limit: a request may reach GRIFFIN_CONTEXT positions.
"""

import dataclasses
import math
import struct
from dataclasses import dataclass

from .mamba_stack_config import FieldsView

RECURRENT_GEMMA_ARCHITECTURES = ("RecurrentGemmaForCausalLM",)
RECURRENT_GEMMA_MODEL_TYPES = {"recurrent_gemma": "RecurrentGemmaForCausalLM"}
GRIFFIN_CONTEXT = 65536
GRIFFIN_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")   # HF's tanh approximations of GELU


@dataclass(frozen=True)
class GriffinLayers:
    recurrent_layers: tuple   # the layers with an RG-LRU block; the others attend locally
    lru_width: int
    lru_heads: int            # the RG-LRU's gates are block-diagonal: this many blocks of lru_width / lru_heads
    conv_kernel: int          # conv1d_width


def recurrent_gemma_fields(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: the MLP's width is half intermediate_size, its activation this module's to
    check, rotary and the window this module's to set."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"RecurrentGemmaForCausalLM: rope_type {params['rope_type']!r} is not supported (default)")
    return FieldsView(hf_config, dict(
        hidden_act="silu", intermediate_size=int(hf_config.intermediate_size) // 2, max_position_embeddings=GRIFFIN_CONTEXT,
        rope_parameters={"rope_type": "default", "rope_theta": float(params.get("rope_theta", 10000.0))},
        rope_scaling=None, sliding_window=None))


def with_recurrent_gemma(config, view):
    """ModelConfig `config` of a RecurrentGemma with its layer kinds; ValueError naming the field it cannot run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    kinds = list(hf.layers_block_type)
    if set(kinds) - {"linear_attention", "sliding_attention"}:
        raise ValueError(f"{arch}: block_types must be recurrent or attention, got {hf.block_types!r}")
    act = getattr(hf, "hidden_activation", "gelu_pytorch_tanh")
    if act not in GRIFFIN_ACTIVATIONS:
        raise ValueError(f"{arch}: hidden_activation {act!r} is not supported ({', '.join(GRIFFIN_ACTIVATIONS)})")
    griffin = GriffinLayers(recurrent_layers=tuple(i for i, k in enumerate(kinds) if k == "linear_attention"),
                            lru_width=int(hf.lru_width), lru_heads=int(hf.num_attention_heads),
                            conv_kernel=int(hf.conv1d_width))
    if griffin.lru_width % griffin.lru_heads:
        raise ValueError(f"{arch}: num_attention_heads {griffin.lru_heads} does not divide lru_width "
                         f"{griffin.lru_width}")
    if griffin.conv_kernel < 2:
        raise ValueError(f"{arch}: the convolution width conv1d_width must be at least 2, got {griffin.conv_kernel}")
    partial = float((getattr(hf, "rope_parameters", None) or {}).get("partial_rotary_factor", 0.5))
    rotary = int(config.head_dim * partial)
    if rotary <= 0 or rotary % 2:
        raise ValueError(f"{arch}: partial_rotary_factor {partial} gives {rotary} rotated dims of {config.head_dim}")
    window = int(hf.attention_window_size)
    return dataclasses.replace(
        config, griffin=griffin, rotary_dim=None if rotary == config.head_dim else rotary, mlp_bias=True,
        o_proj_bias=True, attention_bias=bool(getattr(hf, "attention_bias", False)), sliding_window=window,
        layer_windows=(window,) * (n - len(griffin.recurrent_layers)), final_softcap=float(hf.logits_soft_cap),
        embedding_multiplier=bfloat16(math.sqrt(config.hidden_size)), hidden_act="gelu_tanh")


def bfloat16(x: float) -> float:
    """x rounded to bfloat16 (to nearest, ties to even), as HF's normalizer buffer holds sqrt(hidden_size)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]
