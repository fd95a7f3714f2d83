"""The pure recurrent stacks' fields (no torch): Mamba-2 (HF Mamba2ForCausalLM), Mamba (MambaForCausalLM) and
Falcon Mamba (FalconMambaForCausalLM) have no attention at all: each layer is x + mixer(rmsnorm(x)), the residual
stream kept in float32 where residual_in_fp32 (HF's default), with backbone.{embeddings, layers.{i}.{norm, mixer.*},
norm_f} names.  Their configs name no attention heads and no position limit: attention_free gives the fields
ModelConfig.from_hf reads (one head of 2 dims, no KV layer, STACK_CONTEXT positions).

Mamba-1 mixers (mamba1.py): in_proj to x | z (intermediate_size each), a causal depthwise convolution of width
conv_kernel, x_proj to dt (time_step_rank) | B | C (state_size each), dt_proj back to intermediate_size with a bias,
A_log [intermediate_size, state_size] and D; Falcon Mamba RMS-normalises dt, B and C (no weight, mixer_rms_eps)
after x_proj.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from .mamba_config import Mamba2, checked_mamba2, time_step_limit

MAMBA_STACK_ARCHITECTURES = ("Mamba2ForCausalLM", "MambaForCausalLM", "FalconMambaForCausalLM")
MAMBA_STACK_MODEL_TYPES = {"mamba2": "Mamba2ForCausalLM", "mamba": "MambaForCausalLM",
                           "falcon_mamba": "FalconMambaForCausalLM"}
STACK_CONTEXT = 65536   # the positions a request may reach: the models have no limit of their own


@dataclass(frozen=True)
class Mamba1:
    mamba_layers: tuple      # the layers with a Mamba-1 mixer
    intermediate: int        # the mixer's channels (expand x hidden_size)
    d_state: int             # state_size: the state's width per channel
    conv_kernel: int
    dt_rank: int             # time_step_rank: x_proj's dt width, widened by dt_proj
    conv_bias: bool
    proj_bias: bool          # use_bias: on in_proj and out_proj
    bc_dt_norm_eps: Optional[float] = None   # Falcon Mamba: dt, B and C RMS-normalised (no weight) with this epsilon
    bc_dt_norm_weighted: bool = False        # Jamba: those norms with weights (dt_layernorm, b_layernorm, c_layernorm)
    heads: int = 1                           # Zamba: the channels in this many heads, each with its own x_proj, dt_proj


class FieldsView:
    """hf_config as ModelConfig.from_hf reads it, with `fields` in place of its own."""

    def __init__(self, hf_config, fields: dict):
        self.hf_config, self.fields = hf_config, fields

    def __getattr__(self, name):
        if name in self.fields:
            return self.fields[name]
        return getattr(self.hf_config, name)


def attention_free(hf_config) -> FieldsView:
    """A stack with no attention as from_hf reads it."""
    return FieldsView(hf_config, dict(
        num_attention_heads=1, num_key_value_heads=1, head_dim=2, max_position_embeddings=STACK_CONTEXT,
        rope_parameters=None, rope_scaling=None, sliding_window=None, attention_bias=False, mlp_bias=False,
        intermediate_size=getattr(hf_config, "intermediate_size", None)
        or int(hf_config.expand * hf_config.hidden_size)))


def with_mamba_stack(config, view):
    """ModelConfig `config` of a pure Mamba or Mamba-2 stack (read through attention_free's `view`) with its mixers'
    fields; ValueError naming the field the mixers cannot run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    fp32 = bool(getattr(hf, "residual_in_fp32", True))
    if arch == "Mamba2ForCausalLM":
        dt_min, dt_max = time_step_limit(hf)
        m = Mamba2(mamba_layers=tuple(range(n)), num_heads=int(hf.num_heads), head_dim=int(hf.head_dim),
                   n_groups=int(hf.n_groups), d_state=int(hf.state_size), conv_kernel=int(hf.conv_kernel),
                   conv_bias=bool(hf.use_conv_bias), proj_bias=bool(hf.use_bias), dt_min=dt_min, dt_max=dt_max,
                   block_kinds=("mamba",) * n)
        m = checked_mamba2(arch, m, int(hf.expand * hf.hidden_size))
        return dataclasses.replace(config, mamba2=m, residual_in_fp32=fp32)
    rank = getattr(hf, "time_step_rank", "auto")
    rank = math.ceil(hf.hidden_size / 16) if rank == "auto" else int(rank)
    m = Mamba1(mamba_layers=tuple(range(n)), intermediate=int(hf.intermediate_size), d_state=int(hf.state_size),
               conv_kernel=int(hf.conv_kernel), dt_rank=rank, conv_bias=bool(hf.use_conv_bias),
               proj_bias=bool(hf.use_bias),
               bc_dt_norm_eps=float(hf.mixer_rms_eps) if arch == "FalconMambaForCausalLM" else None)
    if m.conv_kernel < 2:
        raise ValueError(f"{arch}: the convolution width conv_kernel must be at least 2, got {m.conv_kernel}")
    return dataclasses.replace(config, mamba1=m, residual_in_fp32=fp32)
