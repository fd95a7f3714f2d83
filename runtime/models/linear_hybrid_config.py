"""The fields of the linear-attention hybrids added with LaraMini (no torch; registered in more_recurrent_config.py).

LaraMini (HF LaraMiniForCausalLM): Qwen3.5's gated delta nets ("linear_attention", a recurrent state per request)
beside Qwen3 attention layers with per-head q/k norms, "sliding_attention" (a window of sliding_window keys, rotary)
and "full_attention" (no positional encoding at all); every layer's MLP is softmax-routed experts (router in float32,
renormalised when norm_topk_prob) plus an un-gated shared expert; every RMSNorm multiplies by its weight in float32.

MiniMax-Text-01 (HF MiniMaxForCausalLM): lightning attention ("linear_attention": linear attention with a fixed decay
per head and layer, a recurrent state per request) beside Mixtral's rotary attention ("full_attention", sliding_window
when set), each followed by Mixtral's experts; each sublayer adds to its normed input, both weighted by the config's
alpha and beta factors (LightningAttention).

Kimi Linear (HF KimiLinearForCausalLM): Kimi delta attention ("linear_attention": KimiDelta, kda_rule.py) beside
DeepSeek-V3's latent attention without any position embedding ("full_attention", mla_config.py), each followed by the
dense SwiGLU ("dense" in mlp_layer_types) or DeepSeek-V3's experts (sigmoid scores with the correction bias, groups,
routed_scaling_factor, un-gated shared experts).  Ling 3 (HF BailingHybridForCausalLM) is the same stack with
full-rank forget and output gates in its KDA layers (f_proj, g_proj; the forget gate bounded by kda_lower_bound with
kda_safe_gate), rotary latent attention (interleaved pairs) with a sigmoid gate per head, and SwiGLU clipping limits
per layer (refused unless zero).  Qwen4-Exp: qwen4_exp_config.py.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .linear_attention_config import LinearAttention
from .mamba_stack_config import FieldsView
from .mla_config import with_mla
from .moe_config import MoEConfig
from .qwen4_exp_config import qwen4_exp_view, with_qwen4_exp

LINEAR_HYBRID_ARCHITECTURES = ("LaraMiniForCausalLM", "MiniMaxForCausalLM", "KimiLinearForCausalLM",
                               "BailingHybridForCausalLM", "Qwen4ExpForCausalLM")
LINEAR_HYBRID_MODEL_TYPES = {"lara_mini": "LaraMiniForCausalLM", "minimax": "MiniMaxForCausalLM",
                             "kimi_linear": "KimiLinearForCausalLM", "bailing_hybrid": "BailingHybridForCausalLM",
                             "qwen4_exp_text": "Qwen4ExpForCausalLM"}
MINIMAX_LAYER_KINDS = ("linear_attention", "full_attention")
LARA_LAYER_KINDS = ("linear_attention", "sliding_attention", "full_attention")


def linear_hybrid_view(hf_config) -> FieldsView:
    """hf_config as ModelConfig.from_hf reads its common fields: no window of its own (with_linear_hybrid sets the
    sliding layers'); Kimi Linear's rope fields, which it has none of (no layer rotates)."""
    if getattr(hf_config, "model_type", None) == "kimi_linear":
        return FieldsView(hf_config, {"sliding_window": None, "rope_parameters": {"rope_type": "default",
                                                                                   "rope_theta": 10000.0}})
    if getattr(hf_config, "model_type", None) == "qwen4_exp_text":
        return qwen4_exp_view(hf_config)
    if getattr(hf_config, "model_type", None) == "bailing_hybrid":   # head_dim names the KDA heads'
        return FieldsView(hf_config, {"sliding_window": None, "head_dim": hf_config.qk_rope_head_dim})
    return FieldsView(hf_config, {"sliding_window": None})


@dataclass(frozen=True)
class LightningAttention:
    """MiniMax's lightning layers and residual weights: a layer's stream is norm(x) * alpha + sublayer(norm(x)) * beta,
    (alpha, beta) of the attention kind (attention_factors: lightning layers, full layers) or of the MLP."""
    linear_layers: tuple     # the lightning layers; every other one attends over its KV cache
    num_heads: int           # of head_dim each: [q | k | v] per head from qkv_proj
    linear_factors: tuple    # (alpha, beta) around a lightning layer
    full_factors: tuple      # (alpha, beta) around an attention layer
    mlp_factors: tuple       # (alpha, beta) around the experts


@dataclass(frozen=True)
class KimiDelta:
    """Kimi Linear's delta attention layers: num_heads heads of head_dim for q, k and v alike."""
    linear_layers: tuple     # the KDA layers; every other one is latent attention over its KV cache
    num_heads: int
    head_dim: int
    conv_kernel: int         # the causal depthwise convolution's width over q, k and v
    low_rank_gates: bool = True   # Kimi: f_a/f_b and g_a/g_b of rank head_dim; Ling 3: f_proj and g_proj
    gate_lower_bound: Optional[float] = None   # Ling 3's safe gate: g = bound * sigmoid(exp(A_log) * f)
    attention_gate: bool = False  # Ling 3: the latent attention's output times sigmoid(g_proj(x)) per head

    @property
    def conv_dim(self) -> int:
        return 3 * self.num_heads * self.head_dim


def with_linear_hybrid(config, view):
    """ModelConfig `config` of a LaraMini or a MiniMax (read through linear_hybrid_view's `view`) with its recurrent
    layers, windows and experts; ValueError naming the field the layers do not run."""
    if config.architecture == "MiniMaxForCausalLM":
        return _with_minimax(config, view.hf_config)
    if config.architecture == "Qwen4ExpForCausalLM":
        return with_qwen4_exp(config, view)
    if config.architecture in ("KimiLinearForCausalLM", "BailingHybridForCausalLM"):
        return _with_kimi_linear(config, view)
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


def _with_minimax(config, hf):
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf, "layer_types", None) or ())
    if len(types) != n or set(types) - set(MINIMAX_LAYER_KINDS):
        raise ValueError(f"{arch}: layer_types must name one of {MINIMAX_LAYER_KINDS} for each of the {n} layers, "
                         f"got {types!r}")
    window = getattr(hf, "sliding_window", None)
    window = int(window) if window and window < config.max_position_embeddings else None
    windows = tuple(window if kind == "full_attention" else None for kind in types)
    lightning = LightningAttention(
        linear_layers=tuple(i for i, kind in enumerate(types) if kind == "linear_attention"),
        num_heads=config.num_heads,
        linear_factors=(float(hf.linear_attn_alpha_factor), float(hf.linear_attn_beta_factor)),
        full_factors=(float(hf.full_attn_alpha_factor), float(hf.full_attn_beta_factor)),
        mlp_factors=(float(hf.mlp_alpha_factor), float(hf.mlp_beta_factor)))
    moe = MoEConfig(num_experts=int(hf.num_local_experts), top_k=int(hf.num_experts_per_tok),
                    intermediate_size=int(hf.intermediate_size), norm_topk_prob=True, sparse_layers=tuple(range(n)))
    if not 1 <= moe.top_k <= moe.num_experts:
        raise ValueError(f"{arch}: num_experts_per_tok {moe.top_k} must be in 1..{moe.num_experts} (the experts)")
    return dataclasses.replace(config, lightning=lightning, moe=moe, sliding_window=window,
                               layer_windows=windows if window else ())


def _with_kimi_linear(config, view):
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    types, mlp_types = list(hf.layer_types or ()), list(hf.mlp_layer_types or ())
    if len(types) != n or set(types) - set(MINIMAX_LAYER_KINDS):
        raise ValueError(f"{arch}: layer_types must name one of {MINIMAX_LAYER_KINDS} for each of the {n} layers, "
                         f"got {types!r}")
    if len(mlp_types) != n or set(mlp_types) - {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name dense or sparse for each of the {n} layers")
    ling = arch == "BailingHybridForCausalLM"
    kd = KimiDelta(linear_layers=tuple(i for i, kind in enumerate(types) if kind == "linear_attention"),
                   num_heads=int(hf.linear_num_heads), head_dim=int(hf.linear_head_dim),
                   conv_kernel=int(hf.linear_conv_kernel_dim), low_rank_gates=not ling,
                   gate_lower_bound=float(hf.kda_lower_bound) if ling and hf.kda_safe_gate else None,
                   attention_gate=ling)
    for field in ("swiglu_limits", "swiglu_limits_shared") if ling else ():
        if any(getattr(hf, field) or ()):
            raise ValueError(f"{arch}: {field} other than 0 (SwiGLU clipping) is not supported")
    if kd.conv_kernel < 2:
        raise ValueError(f"{arch}: linear_conv_kernel_dim must be at least 2, got {kd.conv_kernel}")
    experts, groups, inter = int(hf.num_local_experts), int(hf.n_group or 1), int(hf.moe_intermediate_size)
    moe = MoEConfig(num_experts=experts, top_k=int(hf.num_experts_per_tok), intermediate_size=inter,
                    norm_topk_prob=bool(hf.norm_topk_prob),
                    sparse_layers=tuple(i for i, kind in enumerate(mlp_types) if kind == "sparse"),
                    shared_expert_intermediate_size=inter * int(hf.n_shared_experts or 0), shared_expert_gate=False,
                    scoring="sigmoid", correction_bias=True, n_group=groups, topk_group=int(hf.topk_group or 1),
                    routed_scaling_factor=float(hf.routed_scaling_factor or 1.0), router_float32=True)
    if not 1 <= moe.top_k <= experts or experts % groups or experts // groups < 2 or not 1 <= moe.topk_group <= groups:
        raise ValueError(f"{arch}: num_experts_per_tok {moe.top_k}, n_group {groups} and topk_group "
                         f"{moe.topk_group} must choose among {experts} experts in groups of 2 or more")
    config = with_mla(config, view)
    if ling:
        return dataclasses.replace(config, kimi_delta=kd, moe=moe)
    return dataclasses.replace(config, kimi_delta=kd, moe=moe, nope_layers=tuple(range(n)),
                               mla=dataclasses.replace(config.mla, rope_interleave=False))
