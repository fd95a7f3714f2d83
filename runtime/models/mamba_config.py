"""The Mamba-2 hybrids' fields (no torch): IBM Granite 4.0 (HF GraniteMoeHybridForCausalLM) stacks Mamba-2 mixers
(mamba2.py) and attention layers (layer_types "mamba" / "linear_attention" and "attention" / "full_attention"), each
followed by Granite 3 MoE's experts plus a shared MLP (or the shared MLP alone when num_local_experts is 0), with
Granite's four multipliers; its attention rotates only with position_embedding_type "rope".
"""

import dataclasses
from dataclasses import dataclass

from .llama_like_config import _granite
from .moe_config import MoEConfig

MAMBA2_ARCHITECTURES = ("GraniteMoeHybridForCausalLM",)
MAMBA2_MODEL_TYPES = {"granitemoehybrid": "GraniteMoeHybridForCausalLM"}
_MIXER, _ATTENTION = ("mamba", "linear_attention"), ("attention", "full_attention")


@dataclass(frozen=True)
class Mamba2:
    mamba_layers: tuple      # the layers with a Mamba-2 mixer; every other one attends over its KV cache
    num_heads: int
    head_dim: int
    n_groups: int            # B and C are shared by num_heads / n_groups heads, and the gated norm is per group
    d_state: int
    conv_kernel: int
    conv_bias: bool
    proj_bias: bool          # on in_proj and out_proj
    dt_min: float            # time_step_limit: softplus(dt + dt_bias) clamped to it
    dt_max: float

    @property
    def intermediate(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate + 2 * self.n_groups * self.d_state


def with_mamba2(config, hf_config):
    """ModelConfig `config` of a Mamba-2 hybrid with its Mamba2 fields, Granite's multipliers and its MoE; ValueError
    for what the layers do not run."""
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf_config, "layer_types", None) or getattr(hf_config, "layers_block_type", None) or ())
    if len(types) != n or set(types) - set(_MIXER + _ATTENTION):
        raise ValueError(f"{arch}: layer_types must name a mamba or an attention layer for each of the {n} layers, "
                         f"got {types!r}")
    heads, head_dim = int(hf_config.mamba_n_heads), int(hf_config.mamba_d_head)
    if heads * head_dim != int(hf_config.mamba_expand * hf_config.hidden_size):
        raise ValueError(f"{arch}: mamba_n_heads x mamba_d_head must be mamba_expand x hidden_size")
    groups = int(hf_config.mamba_n_groups)
    if heads % groups:
        raise ValueError(f"{arch}: mamba_n_heads {heads} is not a multiple of mamba_n_groups {groups}")
    limit = tuple(getattr(hf_config, "time_step_limit", None) or (0.0, float("inf")))
    m = Mamba2(mamba_layers=tuple(i for i, kind in enumerate(types) if kind in _MIXER), num_heads=heads,
               head_dim=head_dim, n_groups=groups, d_state=int(hf_config.mamba_d_state),
               conv_kernel=int(hf_config.mamba_d_conv), conv_bias=bool(hf_config.mamba_conv_bias),
               proj_bias=bool(hf_config.mamba_proj_bias), dt_min=float(limit[0]), dt_max=float(limit[1]))
    if m.conv_kernel < 2:
        raise ValueError(f"{arch}: mamba_d_conv must be at least 2, got {m.conv_kernel}")
    experts, shared = int(getattr(hf_config, "num_local_experts", 0) or 0), int(hf_config.shared_intermediate_size)
    moe = None
    if experts:
        moe = MoEConfig(num_experts=experts, top_k=int(hf_config.num_experts_per_tok),
                        intermediate_size=int(hf_config.intermediate_size), norm_topk_prob=True,
                        sparse_layers=tuple(range(n)), shared_expert_intermediate_size=shared, shared_expert_gate=False)
    rope = getattr(hf_config, "position_embedding_type", None) == "rope"
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dataclasses.replace(config, mamba2=m, moe=moe, intermediate_size=shared, attention_bias=bias,
                               o_proj_bias=bias, nope_layers=() if rope else tuple(range(n)), **_granite(hf_config))
