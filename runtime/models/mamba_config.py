"""The Mamba-2 hybrids' fields (no torch).  IBM Granite 4.0 (HF GraniteMoeHybridForCausalLM) stacks Mamba-2 mixers
(mamba2.py) and attention layers (layer_types "mamba" / "linear_attention" and "attention" / "full_attention"), each
followed by Granite 3 MoE's experts plus a shared MLP (or the shared MLP alone when num_local_experts is 0), with
Granite's four multipliers; its attention rotates only with position_embedding_type "rope".  IBM Bamba
(BambaForCausalLM) is the same stack with a SwiGLU MLP, no multipliers and attention that always rotates the first
half of each head (HF hardcodes partial_rotary_factor 0.5).  NVIDIA Nemotron-H reads its own names
(nemotron_h_config.py) into the same Mamba2 record, and TII Falcon-H1 (falcon_h1_config.py) its mixer and attention
side by side with their multipliers.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .llama_like_config import _granite
from .moe_config import MoEConfig

MAMBA2_ARCHITECTURES = ("GraniteMoeHybridForCausalLM", "BambaForCausalLM", "NemotronHForCausalLM",
                        "FalconH1ForCausalLM")
MAMBA2_MODEL_TYPES = {"granitemoehybrid": "GraniteMoeHybridForCausalLM", "bamba": "BambaForCausalLM",
                      "nemotron_h": "NemotronHForCausalLM", "falcon_h1": "FalconH1ForCausalLM"}
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
    # Nemotron-H: each layer's one block, "mamba", "attention", "mlp" or "moe"; Falcon-H1: "parallel" (a mixer beside
    # attention); Zamba2: "mamba" or "hybrid" (a shared transformer block, then a mixer); () where every layer has a
    # mixer or attention, then an MLP.  Attention, parallel and hybrid blocks have KV in the pool
    block_kinds: tuple = ()
    moe_latent_size: Optional[int] = None   # Nemotron-H: its experts' width in and out (None: hidden_size)
    # the output times silu(gate), RMS-normed per group ("gate_first"), or normed then gated ("norm_first"), or not
    # normed ("none"): Falcon-H1's mamba_norm_before_gate and mamba_rms_norm
    gated_norm: str = "gate_first"
    out_proj_bias: Optional[bool] = None    # Falcon-H1's projectors_bias on out_proj alone (None: proj_bias)
    parallel: Optional["ParallelMultipliers"] = None   # Falcon-H1: attention beside the mixer in every layer

    @property
    def intermediate(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate + 2 * self.n_groups * self.d_state


@dataclass(frozen=True)
class ParallelMultipliers:
    """Falcon-H1's muP multipliers, folded into the weights at load (falcon_h1.py)."""
    ssm_in: float            # on the mixer's input
    ssm_sections: tuple      # on in_proj's z, x, B, C and dt outputs (ssm_multipliers)
    ssm_out: float
    attention_in: float
    key: float               # on the keys, after k_proj
    attention_out: float
    mlp_gate: float          # on the MLP's gate pre-activation (mlp_multipliers[0])
    mlp_down: float          # on its output (mlp_multipliers[1])


def checked_mamba2(arch: str, m: Mamba2, expand_hidden: Optional[int] = None) -> Mamba2:
    """m, or ValueError naming the field the mixers cannot run (expand_hidden: mamba_expand x hidden_size where the
    config has it)."""
    if expand_hidden is not None and m.intermediate != expand_hidden:
        raise ValueError(f"{arch}: mamba heads x head dim ({m.intermediate}) must be mamba_expand x hidden_size "
                         f"({expand_hidden})")
    if m.num_heads % m.n_groups:
        raise ValueError(f"{arch}: the {m.num_heads} mamba heads are not a multiple of n_groups {m.n_groups}")
    if m.conv_kernel < 2:
        raise ValueError(f"{arch}: the convolution width (mamba_d_conv / conv_kernel) must be at least 2, "
                         f"got {m.conv_kernel}")
    return m


def time_step_limit(hf_config) -> tuple:
    limit = tuple(getattr(hf_config, "time_step_limit", None) or (0.0, float("inf")))
    return float(limit[0]), float(limit[1])


def with_mamba2(config, hf_config):
    """ModelConfig `config` of Granite 4.0 or Bamba with its Mamba2 fields, Granite's multipliers and its MoE;
    ValueError for what the layers do not run."""
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf_config, "layer_types", None) or getattr(hf_config, "layers_block_type", None) or ())
    if len(types) != n or set(types) - set(_MIXER + _ATTENTION):
        raise ValueError(f"{arch}: layer_types must name a mamba or an attention layer for each of the {n} layers, "
                         f"got {types!r}")
    dt_min, dt_max = time_step_limit(hf_config)
    m = Mamba2(mamba_layers=tuple(i for i, kind in enumerate(types) if kind in _MIXER),
               num_heads=int(hf_config.mamba_n_heads), head_dim=int(hf_config.mamba_d_head),
               n_groups=int(hf_config.mamba_n_groups), d_state=int(hf_config.mamba_d_state),
               conv_kernel=int(hf_config.mamba_d_conv), conv_bias=bool(hf_config.mamba_conv_bias),
               proj_bias=bool(hf_config.mamba_proj_bias), dt_min=dt_min, dt_max=dt_max)
    m = checked_mamba2(arch, m, int(hf_config.mamba_expand * hf_config.hidden_size))
    bias = bool(getattr(hf_config, "attention_bias", False))
    if arch == "BambaForCausalLM":
        return dataclasses.replace(config, mamba2=m, attention_bias=bias, o_proj_bias=bias,
                                   rotary_dim=config.head_dim // 2)
    experts, shared = int(getattr(hf_config, "num_local_experts", 0) or 0), int(hf_config.shared_intermediate_size)
    moe = None
    if experts:
        moe = MoEConfig(num_experts=experts, top_k=int(hf_config.num_experts_per_tok),
                        intermediate_size=int(hf_config.intermediate_size), norm_topk_prob=True,
                        sparse_layers=tuple(range(n)), shared_expert_intermediate_size=shared, shared_expert_gate=False)
    rope = getattr(hf_config, "position_embedding_type", None) == "rope"
    return dataclasses.replace(config, mamba2=m, moe=moe, intermediate_size=shared, attention_bias=bias,
                               o_proj_bias=bias, nope_layers=() if rope else tuple(range(n)), **_granite(hf_config))
