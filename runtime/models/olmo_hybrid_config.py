"""OLMo Hybrid's fields (no torch; HF OlmoHybridForCausalLM): gated delta-net layers ("linear_attention": separate
q, k, v, a, b and g projections, a convolution without bias, beta = 2 sigmoid(b) where linear_allow_neg_eigval, an
output norm of epsilon 1e-5, pre-norm) and OLMo 3's post-norm attention layers ("full_attention": whole-width q/k
norms, rotary only where rope_parameters names a rope_theta, no sliding window), each with a SwiGLU MLP; every RMSNorm
multiplies by its weight in float32 (OLMo 2's).
"""

import dataclasses

from .linear_attention_config import LinearAttention

OLMO_HYBRID_NORM_EPS = 1e-5   # HF's o_norm epsilon, whatever rms_norm_eps is


def with_olmo_hybrid(config, hf_config):
    """ModelConfig `config` of an OLMo Hybrid with its LinearAttention; ValueError naming the field the layers do not
    run."""
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf_config, "layer_types", None) or ())
    if len(types) != n or set(types) - {"linear_attention", "full_attention"}:
        raise ValueError(f"{arch}: layer_types must name linear_attention or full_attention for each of the {n} "
                         f"layers, got {types!r}")
    if config.attention_bias:
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    la = LinearAttention(
        linear_layers=tuple(i for i, kind in enumerate(types) if kind == "linear_attention"),
        num_k_heads=int(hf_config.linear_num_key_heads), num_v_heads=int(hf_config.linear_num_value_heads),
        head_k_dim=int(hf_config.linear_key_head_dim), head_v_dim=int(hf_config.linear_value_head_dim),
        conv_kernel=int(hf_config.linear_conv_kernel_dim), packed_projections=False,
        beta_scale=2.0 if getattr(hf_config, "linear_allow_neg_eigval", True) else 1.0, norm_eps=OLMO_HYBRID_NORM_EPS)
    if la.num_v_heads != la.num_k_heads:   # HF's delta rule pairs value head i with key head i
        raise ValueError(f"{arch}: linear_num_value_heads {la.num_v_heads} must equal linear_num_key_heads "
                         f"{la.num_k_heads}")
    if la.conv_kernel < 2:
        raise ValueError(f"{arch}: linear_conv_kernel_dim must be at least 2, got {la.conv_kernel}")
    params = getattr(hf_config, "rope_parameters", None) or {}
    nope = tuple(range(n)) if params.get("rope_theta") is None else ()
    return dataclasses.replace(config, linear_attention=la, nope_layers=nope, sliding_window=None, layer_windows=())
