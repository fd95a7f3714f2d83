"""The fields of the linear-attention hybrids added with LaraMini (no torch; registered in more_recurrent_config.py).

LaraMini (HF LaraMiniForCausalLM): Qwen3.5's gated delta nets ("linear_attention", a recurrent state per request)
beside Qwen3 attention layers with per-head q/k norms, "sliding_attention" (a window of sliding_window keys, rotary)
and "full_attention" (no positional encoding at all); every layer's MLP is softmax-routed experts (router in float32,
renormalised when norm_topk_prob) plus an un-gated shared expert; every RMSNorm multiplies by its weight in float32.
"""

import dataclasses

from .linear_attention_config import LinearAttention
from .mamba_stack_config import FieldsView
from .moe_config import MoEConfig

LINEAR_HYBRID_ARCHITECTURES = ("LaraMiniForCausalLM",)
LINEAR_HYBRID_MODEL_TYPES = {"lara_mini": "LaraMiniForCausalLM"}
LARA_LAYER_KINDS = ("linear_attention", "sliding_attention", "full_attention")


def linear_hybrid_view(hf_config) -> FieldsView:
    """hf_config as ModelConfig.from_hf reads its common fields: no window of its own (with_linear_hybrid sets the
    sliding layers')."""
    return FieldsView(hf_config, {"sliding_window": None})


def with_linear_hybrid(config, view):
    """ModelConfig `config` of a LaraMini (read through linear_hybrid_view's `view`) with its delta nets, windows and
    experts; ValueError naming the field the layers do not run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    types = list(getattr(hf, "layer_types", None) or ())
    if len(types) != n or set(types) - set(LARA_LAYER_KINDS):
        raise ValueError(f"{arch}: layer_types must name one of {LARA_LAYER_KINDS} for each of the {n} layers, "
                         f"got {types!r}")
    if config.attention_bias:
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    window = getattr(hf, "sliding_window", None)
    if "sliding_attention" in types and not window:
        raise ValueError(f"{arch}: sliding_attention layers need a sliding_window, got {window!r}")
    la = LinearAttention(
        linear_layers=tuple(i for i, kind in enumerate(types) if kind == "linear_attention"),
        num_k_heads=int(hf.linear_num_key_heads), num_v_heads=int(hf.linear_num_value_heads),
        head_k_dim=int(hf.linear_key_head_dim), head_v_dim=int(hf.linear_value_head_dim),
        conv_kernel=int(hf.linear_conv_kernel_dim), packed_projections=False)
    if la.num_v_heads % la.num_k_heads:
        raise ValueError(f"{arch}: linear_num_value_heads {la.num_v_heads} is not a multiple of "
                         f"linear_num_key_heads {la.num_k_heads}")
    if la.conv_kernel < 2:
        raise ValueError(f"{arch}: linear_conv_kernel_dim must be at least 2, got {la.conv_kernel}")
    moe = MoEConfig(num_experts=int(hf.num_experts), top_k=int(hf.num_experts_per_tok),
                    intermediate_size=int(hf.moe_intermediate_size), norm_topk_prob=bool(hf.norm_topk_prob),
                    sparse_layers=tuple(range(n)),
                    shared_expert_intermediate_size=int(hf.shared_expert_intermediate_size or 0),
                    shared_expert_gate=False, router_float32=True)
    if not 1 <= moe.top_k <= moe.num_experts:
        raise ValueError(f"{arch}: num_experts_per_tok {moe.top_k} must be in 1..{moe.num_experts} (the experts)")
    windows = tuple(int(window) if kind == "sliding_attention" else None for kind in types)
    return dataclasses.replace(config, linear_attention=la, qk_norm=True, moe=moe, sliding_window=window,
                               layer_windows=windows if any(windows) else (),
                               nope_layers=tuple(i for i, kind in enumerate(types) if kind == "full_attention"))
