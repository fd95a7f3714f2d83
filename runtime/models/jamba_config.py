"""AI21 Jamba's fields (no torch; HF JambaForCausalLM): Mamba-1 mixers (mamba1.py, with weighted RMS norms of
epsilon rms_norm_eps on dt, B and C) and attention layers without any position embedding (every attn_layer_period-th
layer from attn_layer_offset), each followed by a SwiGLU MLP or, every expert_layer_period-th layer from
expert_layer_offset, num_experts experts chosen by a softmax router's top num_experts_per_tok, never renormalised.
HF's attention has no sliding window and no biases.
"""

import dataclasses
import math

from .mamba_stack_config import Mamba1
from .moe_config import MoEConfig, _check


def with_jamba(config, hf_config):
    """ModelConfig `config` of a Jamba with its Mamba-1 mixers and experts; ValueError naming the field the layers do
    not run."""
    arch, n = config.architecture, config.num_layers
    attn_period, attn_offset = int(hf_config.attn_layer_period), int(hf_config.attn_layer_offset)
    expert_period, expert_offset = int(hf_config.expert_layer_period), int(hf_config.expert_layer_offset)
    if attn_offset >= attn_period or expert_offset >= expert_period:
        raise ValueError(f"{arch}: attn_layer_offset / expert_layer_offset must be below attn_layer_period / "
                         f"expert_layer_period, got {attn_offset}/{attn_period} and {expert_offset}/{expert_period}")
    rank = getattr(hf_config, "mamba_dt_rank", "auto")
    rank = math.ceil(hf_config.hidden_size / 16) if rank == "auto" else int(rank)
    m = Mamba1(mamba_layers=tuple(i for i in range(n) if i % attn_period != attn_offset),
               intermediate=int(hf_config.mamba_expand * hf_config.hidden_size), d_state=int(hf_config.mamba_d_state),
               conv_kernel=int(hf_config.mamba_d_conv), dt_rank=rank, conv_bias=bool(hf_config.mamba_conv_bias),
               proj_bias=bool(hf_config.mamba_proj_bias), bc_dt_norm_eps=config.rms_norm_eps, bc_dt_norm_weighted=True)
    if m.conv_kernel < 2:
        raise ValueError(f"{arch}: the convolution width mamba_d_conv must be at least 2, got {m.conv_kernel}")
    experts = int(hf_config.num_experts)
    sparse = tuple(i for i in range(n) if i % expert_period == expert_offset) if experts > 1 else ()
    moe = _check(MoEConfig(num_experts=experts, top_k=int(hf_config.num_experts_per_tok),
                           intermediate_size=config.intermediate_size, norm_topk_prob=False, sparse_layers=sparse),
                 arch) if sparse else None
    return dataclasses.replace(config, mamba1=m, moe=moe, nope_layers=tuple(range(n)), rotary_dim=None,
                               rope_scaling=None, sliding_window=None, layer_windows=(), attention_bias=False,
                               o_proj_bias=False)
