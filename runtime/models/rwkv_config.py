"""RWKV-4's fields (no torch; HF RwkvForCausalLM).  No attention at all: each layer is a time mix (the WKV recurrence
over attention_hidden_size channels, its inputs mixed with the previous token's) and a channel mix (a squared-ReLU
MLP of intermediate_size), each after a LayerNorm; layer 0 first LayerNorms the embeddings (pre_ln).  HF's eval mode
halves the residual stream after every rescale_every layers and divides the layers' output weights to match
(rwkv.py does the same).  The configs' context_length only sizes HF's CUDA kernel: a request may reach RWKV_CONTEXT
positions.
"""

import dataclasses
from dataclasses import dataclass

from .mamba_stack_config import FieldsView

RWKV_ARCHITECTURES = ("RwkvForCausalLM",)
RWKV_MODEL_TYPES = {"rwkv": "RwkvForCausalLM"}
RWKV_CONTEXT = 65536


@dataclass(frozen=True)
class RwkvLayout:
    recurrent_layers: tuple     # every layer: each keeps its WKV state and its two token shifts per request row
    attention_width: int        # attention_hidden_size: the WKV channels
    rescale_every: int          # 0: never


def rwkv_fields(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: no attention heads, no position limit, LayerNorms of layer_norm_epsilon."""
    return FieldsView(hf_config, dict(
        num_attention_heads=1, num_key_value_heads=1, head_dim=2, max_position_embeddings=RWKV_CONTEXT,
        rope_parameters=None, rope_scaling=None, sliding_window=None, attention_bias=False, mlp_bias=False,
        hidden_act="silu", rms_norm_eps=float(hf_config.layer_norm_epsilon)))


def with_rwkv(config, view):
    """ModelConfig `config` of an RWKV-4 with its layout; ValueError naming the field it cannot run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    rescale = int(getattr(hf, "rescale_every", 0) or 0)
    if rescale < 0:
        raise ValueError(f"{arch}: rescale_every must be 0 or more, got {rescale}")
    if int(hf.attention_hidden_size) != config.hidden_size:   # HF's own cached state is hidden_size wide
        raise ValueError(f"{arch}: attention_hidden_size must equal hidden_size, got {hf.attention_hidden_size}")
    layout = RwkvLayout(recurrent_layers=tuple(range(n)), attention_width=int(hf.attention_hidden_size),
                        rescale_every=rescale)
    return dataclasses.replace(config, rwkv=layout)
