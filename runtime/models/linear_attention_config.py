"""The hybrid families' fields (no torch): Qwen3-Next and Qwen3.5 stack gated delta-net layers (linear attention
with a recurrent state per request, gated_delta_net.py) and full-attention layers (gated output, KV cached).

Read from HF's config: layer_types ("linear_attention" or "full_attention" per layer), linear_num_key_heads,
linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim; the attention layers
always have per-head q/k norms and an output gate.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional

HYBRID_ARCHITECTURES = ("Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
HYBRID_MODEL_TYPES = {"qwen3_next": "Qwen3NextForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM",
                      "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}
PACKED_PROJECTIONS = ("Qwen3NextForCausalLM",)   # in_proj_qkvz / in_proj_ba grouped by key head


@dataclass(frozen=True)
class LinearAttention:
    linear_layers: tuple     # the layers with a gated delta net; every other one attends over its KV cache
    num_k_heads: int
    num_v_heads: int         # a multiple of num_k_heads: value head i reads key head i // (num_v_heads / num_k_heads)
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int         # the causal depthwise convolution's width over q, k and v
    packed_projections: bool  # Qwen3-Next's checkpoint layout (converted at load to Qwen3.5's)
    beta_scale: float = 1.0   # OLMo Hybrid's allow_neg_eigval: beta = 2 sigmoid(b), in (0, 2)
    norm_eps: Optional[float] = None   # the output norm's epsilon (None: rms_norm_eps; OLMo Hybrid: 1e-5)

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


def with_linear_attention(config, hf_config):
    """ModelConfig `config` of a hybrid architecture with its LinearAttention and per-head q/k norms; ValueError
    for what the layers do not run."""
    arch, n = config.architecture, config.num_layers
    types = list(getattr(hf_config, "layer_types", None) or ())
    if len(types) != n or set(types) - {"linear_attention", "full_attention"}:
        raise ValueError(f"{arch}: layer_types must name linear_attention or full_attention for each of the {n} "
                         f"layers, got {types!r}")
    if config.attention_bias:
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"{arch}: hidden_act {hf_config.hidden_act!r} is not supported (silu only)")
    la = LinearAttention(
        linear_layers=tuple(i for i, kind in enumerate(types) if kind == "linear_attention"),
        num_k_heads=int(hf_config.linear_num_key_heads), num_v_heads=int(hf_config.linear_num_value_heads),
        head_k_dim=int(hf_config.linear_key_head_dim), head_v_dim=int(hf_config.linear_value_head_dim),
        conv_kernel=int(hf_config.linear_conv_kernel_dim), packed_projections=arch in PACKED_PROJECTIONS)
    if la.num_v_heads % la.num_k_heads:
        raise ValueError(f"{arch}: linear_num_value_heads {la.num_v_heads} is not a multiple of "
                         f"linear_num_key_heads {la.num_k_heads}")
    if la.conv_kernel < 2:
        raise ValueError(f"{arch}: linear_conv_kernel_dim must be at least 2, got {la.conv_kernel}")
    return dataclasses.replace(config, linear_attention=la, qk_norm=True)
