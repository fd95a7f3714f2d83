"""Zyphra Zamba's fields (no torch; HF ZambaForCausalLM, Zamba v1).  Every layer has a Mamba-1 mixer split into
n_mamba_heads heads (zamba.py: each head its own x_proj, dt_proj, A_log and D; in_proj's outputs interleave x and the
gate), its convolution and SiLU as Mamba's; a "hybrid" layer first runs the one shared transformer block (zamba2.py's
Zamba2Block, without adapters or rotary) on [x | the token embeddings] (attention_hidden_size = 2 x hidden_size):
attention of attention_head_dim dims per head, scores scaled by (head_dim / 2) ** -0.5, then a gated MLP of
hidden_act; its output, through the layer's `linear`, is added to the mixer's input.  Each hybrid layer keeps its own
KV in the pool.
"""

import dataclasses

from .mamba_stack_config import FieldsView, Mamba1
from .zamba2_config import ZAMBA2_ACTIVATIONS, SharedBlocks

ZAMBA_ARCHITECTURES = ("ZambaForCausalLM",)
ZAMBA_MODEL_TYPES = {"zamba": "ZambaForCausalLM"}


def zamba_fields(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: its MLP activation is with_zamba's to check, not SwiGLU's."""
    return FieldsView(hf_config, {"hidden_act": "silu", "rope_parameters": None, "rope_scaling": None})


def with_zamba(config, view):
    """ModelConfig `config` of a Zamba with its mixers and shared block; ValueError naming the field it cannot run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    types = list(hf.layers_block_type)
    if len(types) != n or set(types) - {"linear_attention", "mamba", "hybrid"}:
        raise ValueError(f"{arch}: layers_block_type must name mamba (linear_attention) or hybrid for each of the {n} "
                         f"layers, got {types!r}")
    act = getattr(hf, "hidden_act", "gelu")
    if act not in ZAMBA2_ACTIVATIONS:
        raise ValueError(f"{arch}: hidden_act {act!r} is not supported ({', '.join(ZAMBA2_ACTIVATIONS)})")
    if getattr(hf, "hidden_mamba_act", "silu") != "silu":
        raise ValueError(f"{arch}: hidden_mamba_act {hf.hidden_mamba_act!r} is not supported (silu)")
    if int(hf.attention_hidden_size) != 2 * config.hidden_size:
        raise ValueError(f"{arch}: attention_hidden_size must be 2 x hidden_size, got {hf.attention_hidden_size}")
    width, heads = int(hf.mamba_expand * hf.hidden_size), int(hf.n_mamba_heads)
    if width % heads:
        raise ValueError(f"{arch}: n_mamba_heads {heads} does not divide mamba_expand x hidden_size {width}")
    m = Mamba1(mamba_layers=tuple(range(n)), intermediate=width, d_state=int(hf.mamba_d_state),
               conv_kernel=int(hf.mamba_d_conv), dt_rank=int(hf.mamba_dt_rank), conv_bias=bool(hf.mamba_conv_bias),
               proj_bias=bool(hf.mamba_proj_bias), heads=heads)
    if m.conv_kernel < 2:
        raise ValueError(f"{arch}: the convolution width mamba_d_conv must be at least 2, got {m.conv_kernel}")
    hybrid = tuple(i for i, kind in enumerate(types) if kind == "hybrid")
    blocks = SharedBlocks(hybrid_layers=hybrid, num_blocks=1, adapter_rank=0, mlp_act=act)
    return dataclasses.replace(config, mamba1=m, shared_blocks=blocks, nope_layers=tuple(range(n)),
                               attention_multiplier=(config.head_dim / 2) ** -0.5, attention_bias=False,
                               o_proj_bias=False, sliding_window=None, layer_windows=())
