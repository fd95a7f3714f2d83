"""Inkling's fields (HF InklingForCausalLM, model_type inkling_text), no torch.

Every layer attends (no rope): sliding layers ("hybrid_sliding": swa_* heads, a window of sliding_window_size keys) and
full ones ("hybrid": num_attention_heads, ...), q and k RMSNormed per head, scores scaled by 1 / head_dim plus a learned
bias per query, head and backward distance (r_proj's d_rel states mixed over rel_logits_proj's profiles; zero past
rel_extent, the sliding layers' extent being their window); the full layers' scores times 1 + alpha * log(max(
(position + 1) / n_floor, 1)) where log_scaling_n_floor is set.  Four short causal convolutions per layer (on K, V, the
attention's output and the MLP's, each x + conv(x) in float32) keep their last inputs per request row.  MLPs dense
(times a learned global scale) or experts routed by sigmoid scores whose softmax also weighs the shared experts.
The embeddings are RMSNormed; the final hidden states divided by logits_mup_width_multiplier before the head.
ModelConfig's num_kv_heads is 1 and head_dim the widest layer's K (all its heads): the pool holds each layer's flat K/V.
"""

from dataclasses import dataclass
from typing import Optional

from .mamba_stack_config import FieldsView

INKLING_MODEL_TYPES = {"inkling_text": "InklingForCausalLM"}
INKLING_ARCHITECTURES = tuple(INKLING_MODEL_TYPES.values())
_SLIDING, _FULL = "hybrid_sliding", "hybrid"


@dataclass(frozen=True)
class InklingLayout:
    sliding_layers: tuple     # the layers of window `window`; the others attend over every earlier key
    window: int
    swa_shape: tuple          # the sliding layers' (query heads, KV heads, head_dim)
    full_shape: tuple         # the full layers' (query heads, KV heads, head_dim)
    d_rel: int                # each head's relative states
    rel_extent: int           # the full layers' bias reach in keys (the sliding ones': window)
    log_floor: Optional[int]  # log_scaling_n_floor (None: no log scaling)
    log_alpha: float
    conv_kernel: int
    sparse_layers: tuple      # the layers of experts; the others a dense SwiGLU of intermediate_size
    experts: int
    top_k: int
    shared_experts: int
    expert_intermediate: int
    route_scale: float
    logits_divisor: float     # logits_mup_width_multiplier

    def shape(self, layer: int) -> tuple:
        return self.swa_shape if layer in self.sliding_layers else self.full_shape

    def kv_width(self, layer: int) -> int:
        _, kv_heads, head_dim = self.shape(layer)
        return kv_heads * head_dim


def inkling_view(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: the pool's one head of the widest layer's K, no rope, no window of its own."""
    widest = max(int(hf_config.swa_num_key_value_heads) * int(hf_config.swa_head_dim),
                 int(hf_config.num_key_value_heads) * int(hf_config.head_dim))
    return FieldsView(hf_config, dict(num_key_value_heads=1, head_dim=widest, rope_parameters=None, rope_scaling=None,
                                      sliding_window=None, attention_bias=False, mlp_bias=False))


def with_inkling(config, hf_config):
    """ModelConfig `config` with its InklingLayout; ValueError for what the layers do not run."""
    import dataclasses

    arch, n = config.architecture, config.num_layers
    types, mlps = list(hf_config.layer_types or ()), list(hf_config.mlp_layer_types or ())
    if len(types) != n or set(types) - {_SLIDING, _FULL}:
        raise ValueError(f"{arch}: layer_types must name {_SLIDING!r} or {_FULL!r} for each of the {n} layers")
    if len(mlps) != n or set(mlps) - {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {n} layers")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"{arch}: hidden_act {hf_config.hidden_act!r} is not supported; only 'silu'")
    unpadded = getattr(hf_config, "unpadded_vocab_size", None)
    if unpadded is not None and int(unpadded) != config.vocab_size:
        raise ValueError(f"{arch}: unpadded_vocab_size {unpadded} (logits cut below vocab_size) is not supported")
    shapes = [(int(getattr(hf_config, p + "num_attention_heads")), int(getattr(hf_config, p + "num_key_value_heads")),
               int(getattr(hf_config, p + "head_dim"))) for p in ("swa_", "")]
    for heads, kv_heads, _ in shapes:
        if heads % kv_heads:
            raise ValueError(f"{arch}: {heads} attention heads are not a multiple of {kv_heads} key/value heads")
    experts, k, shared = int(hf_config.n_routed_experts), int(hf_config.num_experts_per_tok), int(
        hf_config.n_shared_experts)
    if "sparse" in mlps and not (1 <= k <= experts and shared >= 1):
        raise ValueError(f"{arch}: experts need 1 <= num_experts_per_tok ({k}) <= n_routed_experts ({experts}) "
                         f"and n_shared_experts >= 1 (got {shared})")
    if not getattr(hf_config, "shared_expert_sink", True):
        raise ValueError(f"{arch}: shared_expert_sink=False is not supported (HF's router weighs them anyway)")
    kernel, floor = int(hf_config.conv_kernel_size), hf_config.log_scaling_n_floor
    if kernel < 1 or int(hf_config.sliding_window_size) < 1 or int(hf_config.rel_extent) < 1:
        raise ValueError(f"{arch}: conv_kernel_size, sliding_window_size and rel_extent must be at least 1")
    layout = InklingLayout(
        sliding_layers=tuple(i for i, t in enumerate(types) if t == _SLIDING), window=int(hf_config.sliding_window_size),
        swa_shape=shapes[0], full_shape=shapes[1], d_rel=int(hf_config.d_rel), rel_extent=int(hf_config.rel_extent),
        log_floor=None if floor is None else int(floor), log_alpha=float(hf_config.log_scaling_alpha),
        conv_kernel=kernel, sparse_layers=tuple(i for i, t in enumerate(mlps) if t == "sparse"), experts=experts,
        top_k=k, shared_experts=shared, expert_intermediate=int(hf_config.moe_intermediate_size),
        route_scale=float(hf_config.route_scale), logits_divisor=float(hf_config.logits_mup_width_multiplier))
    return dataclasses.replace(config, inkling=layout, num_heads=shapes[1][0])
