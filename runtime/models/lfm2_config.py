"""The LFM2 hybrids' fields (no torch): Liquid AI's LFM2 (HF Lfm2ForCausalLM) and LFM2-MoE (Lfm2MoeForCausalLM)
stack short-convolution layers (layer_types "conv": in_proj -> B, C, x; C * causal depthwise conv of width
conv_L_cache over B * x; out_proj) and attention layers ("full_attention", with per-head q/k RMSNorms before rope),
each followed by a SwiGLU feed_forward; all norms are RMSNorms of epsilon norm_eps, the last one named
embedding_norm.  LFM2's feed-forward width follows block_auto_adjust_ff_dim (HF's Lfm2MLP, lfm2_intermediate);
LFM2-MoE's first num_dense_layers layers are dense (intermediate_size), the rest experts of moe_intermediate_size
routed by sigmoid scores, the expert bias for the choice only (use_expert_bias), the chosen scores renormalised
(norm_topk_prob, with HF's 1e-6 in the sum), times routed_scaling_factor.
"""

import dataclasses
from dataclasses import dataclass

from .lfm3_config import LFM3_LAYER_KINDS, lfm3_fields, lfm3_short_conv
from .moe_config import MoEConfig

LFM2_ARCHITECTURES = ("Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Lfm3ForCausalLM")
LFM2_MODEL_TYPES = {"lfm2": "Lfm2ForCausalLM", "lfm2_moe": "Lfm2MoeForCausalLM", "lfm3": "Lfm3ForCausalLM"}
_CONV, _ATTENTION = "conv", "full_attention"


@dataclass(frozen=True)
class ShortConv:
    conv_layers: tuple      # the layers with a short convolution; every other one attends over its KV cache
    conv_kernel: int        # conv_L_cache: the convolution's width
    bias: bool              # conv_bias: on in_proj, the convolution and out_proj
    # LFM3 (lfm3_config.py): each sublayer's output RMSNormed, a gate per query head, per layer (base, fraction, factor)
    sandwich_norms: bool = False
    attention_gate: bool = False
    layer_ropes: tuple = ()


def lfm2_fields(hf_config, arch: str) -> dict:
    """ModelConfig.from_hf's fields that LFM2 names its own way: the feed-forward width, norm_eps, the q/k norms."""
    if arch == "Lfm3ForCausalLM":
        return lfm3_fields(hf_config)
    return dict(intermediate_size=lfm2_intermediate(hf_config), rms_norm_eps=float(hf_config.norm_eps), qk_norm=True)


def lfm2_intermediate(hf_config) -> int:
    """HF Lfm2MLP's width: intermediate_size, or with block_auto_adjust_ff_dim 2/3 of it, times
    block_ffn_dim_multiplier rounded up to block_multiple_of where that multiplier is set (LFM2-MoE: as given)."""
    width = int(hf_config.intermediate_size)
    if not getattr(hf_config, "block_auto_adjust_ff_dim", False):
        return width
    width = int(2 * width / 3)
    multiplier = getattr(hf_config, "block_ffn_dim_multiplier", None)
    if multiplier is not None:
        width = int(multiplier * width)
        step = int(hf_config.block_multiple_of)
        width = step * ((width + step - 1) // step)
    return width


def with_lfm2(config, hf_config):
    """ModelConfig `config` of an LFM2 model with its ShortConv fields and LFM2-MoE's experts; ValueError for what the
    layers do not run."""
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf_config, "layer_types", None) or ())
    kinds = LFM3_LAYER_KINDS if arch == "Lfm3ForCausalLM" else (_CONV, _ATTENTION)
    if len(types) != n or set(types) - set(kinds):
        raise ValueError(f"{arch}: layer_types must name one of {kinds} for each of the {n} layers, got {types!r}")
    lfm3 = lfm3_short_conv(hf_config) if arch == "Lfm3ForCausalLM" else {}
    conv = ShortConv(conv_layers=tuple(i for i, kind in enumerate(types) if kind == _CONV),
                     conv_kernel=int(hf_config.conv_L_cache), bias=bool(hf_config.conv_bias), **lfm3)
    if conv.conv_kernel < 1:
        raise ValueError(f"{arch}: conv_L_cache must be at least 1, got {conv.conv_kernel}")
    moe = _experts(hf_config, arch, n) if arch == "Lfm2MoeForCausalLM" else None
    return dataclasses.replace(config, short_conv=conv, moe=moe)


def _experts(hf_config, arch: str, n: int) -> MoEConfig:
    experts, k = int(hf_config.num_experts), int(hf_config.num_experts_per_tok)
    if not 1 <= k <= experts:
        raise ValueError(f"{arch}: num_experts_per_tok {k} must be in 1..{experts} (the experts)")
    dense = int(hf_config.num_dense_layers)
    if not 0 <= dense <= n:
        raise ValueError(f"{arch}: num_dense_layers {dense} must be in 0..num_hidden_layers ({n})")
    return MoEConfig(num_experts=experts, top_k=k, intermediate_size=int(hf_config.moe_intermediate_size),
                     norm_topk_prob=bool(getattr(hf_config, "norm_topk_prob", True)),
                     sparse_layers=tuple(range(dense, n)), scoring="sigmoid",
                     correction_bias=bool(getattr(hf_config, "use_expert_bias", True)),
                     routed_scaling_factor=float(getattr(hf_config, "routed_scaling_factor", 1.0) or 1.0),
                     topk_norm_eps=1e-6)
