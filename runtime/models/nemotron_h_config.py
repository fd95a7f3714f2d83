"""NVIDIA Nemotron-H's fields (no torch): Nemotron-H, Nemotron Nano 2 and Nemotron 3 Nano (HF NemotronHForCausalLM).

Each layer is one block over a pre-norm residual: a Mamba-2 mixer ("linear_attention", "M" in the older
hybrid_override_pattern), attention without rotary embedding or biases ("full_attention", "*"), a relu^2 MLP ("mlp",
"-") or a mixture of relu^2 experts ("moe", "E") routed as DeepSeek-V3 routes (sigmoid scores, e_score_correction_bias
for the choice, n_group / topk_group, norm_topk_prob, routed_scaling_factor) with one relu^2 shared expert, its experts
optionally between two latent projections (moe_latent_size).  The multi-token prediction layers are not run.
"""

import dataclasses

from .mamba_config import Mamba2, checked_mamba2, time_step_limit
from .moe_config import MoEConfig, _check

_KINDS = {"linear_attention": "mamba", "M": "mamba", "full_attention": "attention", "*": "attention",
          "mlp": "mlp", "-": "mlp", "moe": "moe", "E": "moe"}


def with_nemotron_h(config, hf_config):
    """ModelConfig `config` of a Nemotron-H with its blocks (Mamba2.block_kinds) and its MoE; ValueError naming the
    field the blocks do not run."""
    arch, n = config.architecture, config.num_layers
    kinds = _block_kinds(hf_config)
    if len(kinds) != n or None in kinds:
        raise ValueError(f"{arch}: layers_block_type (or hybrid_override_pattern) must name one of "
                         f"{sorted(set(_KINDS))} for each of the {n} layers, got {kinds!r}")
    for field, want in (("mamba_hidden_act", "silu"), ("mlp_hidden_act", "relu2")):
        if getattr(hf_config, field, want) != want:
            raise ValueError(f"{arch}: only {field}={want!r} is supported, got {getattr(hf_config, field)!r}")
    dt_min, dt_max = time_step_limit(hf_config)
    latent = getattr(hf_config, "moe_latent_size", None)
    m = Mamba2(mamba_layers=tuple(i for i, kind in enumerate(kinds) if kind == "mamba"),
               num_heads=int(hf_config.mamba_num_heads), head_dim=int(hf_config.mamba_head_dim),
               n_groups=int(hf_config.n_groups), d_state=int(hf_config.ssm_state_size),
               conv_kernel=int(hf_config.conv_kernel), conv_bias=bool(hf_config.use_conv_bias),
               proj_bias=bool(getattr(hf_config, "use_bias", False)), dt_min=dt_min, dt_max=dt_max,
               block_kinds=kinds, moe_latent_size=int(latent) if latent else None)
    moe_layers = tuple(i for i, kind in enumerate(kinds) if kind == "moe")
    moe = None
    if moe_layers:
        moe = _check(MoEConfig(
            num_experts=int(hf_config.n_routed_experts), top_k=int(hf_config.num_experts_per_tok),
            intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=bool(hf_config.norm_topk_prob),
            sparse_layers=moe_layers, shared_expert_intermediate_size=int(hf_config.moe_shared_expert_intermediate_size),
            shared_expert_gate=False, scoring="sigmoid", correction_bias=True, n_group=int(hf_config.n_group or 1),
            topk_group=int(hf_config.topk_group or 1), routed_scaling_factor=float(hf_config.routed_scaling_factor),
            router_float32=True), arch)
    # HF's attention has neither rotary embedding nor biases, and attends over every earlier token
    return dataclasses.replace(config, mamba2=checked_mamba2(arch, m), moe=moe, rms_norm_eps=float(
        hf_config.layer_norm_epsilon), attention_bias=False, o_proj_bias=False, nope_layers=tuple(range(n)),
        rotary_dim=None, rope_scaling=None, sliding_window=None, layer_windows=())


def _block_kinds(hf_config) -> tuple:
    """Each layer's block: "mamba", "attention", "mlp", "moe" (None for a name we do not know)."""
    names = getattr(hf_config, "layers_block_type", None) or getattr(hf_config, "hybrid_override_pattern", None) or ()
    return tuple(_KINDS.get(name) for name in names)
