"""TII Falcon-H1's fields (no torch; HF FalconH1ForCausalLM): every layer runs a Mamba-2 mixer and rotary attention
side by side on one RMS-normed input, their outputs summed into the residual, then a SwiGLU MLP; the mixer's width is
mamba_d_ssm (else mamba_expand x hidden_size), its output RMS-normed per group (mamba_rms_norm) before or after the gate
(mamba_norm_before_gate), out_proj with projectors_bias; muP multipliers on the embeddings, the mixer's input, each
section of in_proj's output, the mixer's and the attention's input and output, the keys, the MLP's gate and output,
and the logits (lm_head_multiplier).
"""

import dataclasses

from .mamba_config import Mamba2, ParallelMultipliers, checked_mamba2, time_step_limit


def with_falcon_h1(config, hf_config):
    """ModelConfig `config` of a Falcon-H1 with its Mamba2 fields and multipliers; ValueError naming the field the
    layers do not run."""
    arch, n = config.architecture, config.num_layers
    sections, mlp = tuple(hf_config.ssm_multipliers), tuple(hf_config.mlp_multipliers)
    if len(sections) != 5 or len(mlp) != 2:
        raise ValueError(f"{arch}: ssm_multipliers must hold 5 values and mlp_multipliers 2, got {sections!r} and "
                         f"{mlp!r}")
    width = getattr(hf_config, "mamba_d_ssm", None) or int(hf_config.mamba_expand * hf_config.hidden_size)
    dt_min, dt_max = time_step_limit(hf_config)
    norm = "none"
    if getattr(hf_config, "mamba_rms_norm", False):
        norm = "norm_first" if getattr(hf_config, "mamba_norm_before_gate", True) else "gate_first"
    multipliers = ParallelMultipliers(
        ssm_in=float(hf_config.ssm_in_multiplier), ssm_sections=tuple(float(v) for v in sections),
        ssm_out=float(hf_config.ssm_out_multiplier), attention_in=float(hf_config.attention_in_multiplier),
        key=float(hf_config.key_multiplier), attention_out=float(hf_config.attention_out_multiplier),
        mlp_gate=float(mlp[0]), mlp_down=float(mlp[1]))
    m = Mamba2(mamba_layers=tuple(range(n)), num_heads=int(hf_config.mamba_n_heads),
               head_dim=int(hf_config.mamba_d_head), n_groups=int(hf_config.mamba_n_groups),
               d_state=int(hf_config.mamba_d_state), conv_kernel=int(hf_config.mamba_d_conv),
               conv_bias=bool(hf_config.mamba_conv_bias), proj_bias=bool(hf_config.mamba_proj_bias), dt_min=dt_min,
               dt_max=dt_max, block_kinds=("parallel",) * n, gated_norm=norm,
               out_proj_bias=bool(getattr(hf_config, "projectors_bias", False)), parallel=multipliers)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dataclasses.replace(config, mamba2=checked_mamba2(arch, m, int(width)), attention_bias=bias,
                               o_proj_bias=bias, embedding_multiplier=float(hf_config.embedding_multiplier),
                               logits_scaling=1.0 / float(hf_config.lm_head_multiplier))
