"""Zyphra Zamba2's fields (no torch; HF Zamba2ForCausalLM).  Every layer has a Mamba-2 mixer (mamba2.py: n_mamba_heads
heads of mamba_expand x hidden_size / n_mamba_heads dims, mamba_ngroups groups, a convolution bias, dt clamped below at
time_step_min, its gated norm of epsilon 1e-5); a "hybrid" layer first runs one of num_mem_blocks shared transformer
blocks (in turn: hybrid layer j uses block j % num_mem_blocks) on [x | the token embeddings] (2 x hidden_size wide):
attention of head_dim 2 x hidden_size / num_attention_heads, scores scaled by (head_dim / 2) ** -0.5, rotary where
use_mem_rope, then an MLP of hidden_act, with low-rank adapters (adapter_rank) of the hybrid layer's own on q, k, v and
the MLP's gate_up_proj where use_shared_attention_adapter; the block's output, through the layer's `linear`, is added
to the mixer's input.  Each hybrid layer keeps its own KV in the pool.
"""

import dataclasses
from dataclasses import dataclass

from .mamba_config import Mamba2, checked_mamba2

ZAMBA2_ACTIVATIONS = ("gelu", "silu")   # HF ACT2FN's: erf GELU, SiLU


@dataclass(frozen=True)
class SharedBlocks:
    hybrid_layers: tuple     # the layers that run a shared transformer block before their mixer
    num_blocks: int          # num_mem_blocks: hybrid layer j runs block j % num_blocks
    adapter_rank: int        # 0: no adapters
    mlp_act: str             # ZAMBA2_ACTIVATIONS


def with_zamba2(config, view):
    """ModelConfig `config` of a Zamba2 (read through more_recurrent_config's view, which hides its MLP activation from
    from_hf's SwiGLU check) with its mixers and shared blocks; ValueError naming the field the layers do not run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    types = list(hf.layers_block_type)
    if len(types) != n or set(types) - {"linear_attention", "mamba", "hybrid"}:
        raise ValueError(f"{arch}: layers_block_type must name mamba (linear_attention) or hybrid for each of the {n} "
                         f"layers, got {types!r}")
    for field in ("add_bias_linear", "use_long_context"):
        if getattr(hf, field, False):
            raise ValueError(f"{arch}: {field}=True is not supported")
    act = getattr(hf, "hidden_act", "gelu")
    if act not in ZAMBA2_ACTIVATIONS:
        raise ValueError(f"{arch}: hidden_act {act!r} is not supported ({', '.join(ZAMBA2_ACTIVATIONS)})")
    adapters = bool(getattr(hf, "use_shared_attention_adapter", False))
    if adapters and config.num_kv_heads != config.num_heads:   # HF adds a 2 x hidden_size adapter to k and v
        raise ValueError(f"{arch}: use_shared_attention_adapter needs num_key_value_heads = num_attention_heads, got "
                         f"{config.num_kv_heads} and {config.num_heads}")
    hybrid = tuple(i for i, kind in enumerate(types) if kind == "hybrid")
    heads, width = int(hf.n_mamba_heads), int(hf.mamba_expand * hf.hidden_size)
    m = Mamba2(mamba_layers=tuple(range(n)), num_heads=heads, head_dim=width // heads, n_groups=int(hf.mamba_ngroups),
               d_state=int(hf.mamba_d_state), conv_kernel=int(hf.mamba_d_conv), conv_bias=True, proj_bias=False,
               dt_min=float(hf.time_step_min), dt_max=float("inf"),
               block_kinds=tuple("hybrid" if i in hybrid else "mamba" for i in range(n)))
    blocks = SharedBlocks(hybrid_layers=hybrid, num_blocks=int(hf.num_mem_blocks),
                          adapter_rank=int(hf.adapter_rank) if adapters else 0, mlp_act=act)
    nope = () if getattr(hf, "use_mem_rope", False) else tuple(range(n))
    return dataclasses.replace(config, mamba2=checked_mamba2(arch, m, width), shared_blocks=blocks, nope_layers=nope,
                               attention_multiplier=(config.head_dim / 2) ** -0.5, attention_bias=False,
                               o_proj_bias=False, sliding_window=None, layer_windows=())
