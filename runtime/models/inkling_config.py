"""Inkling's fields (HF InklingForCausalLM, model_type inkling_text), Inkling 2's (Inkling2ForCausalLM: inkling2.py
has its differences) and Inkling 2 Loop's (Inkling2LoopForCausalLM: inkling2_loop.py), no torch.

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

INKLING_MODEL_TYPES = {"inkling_text": "InklingForCausalLM", "inkling2_text": "Inkling2ForCausalLM",
                       "inkling2_loop_text": "Inkling2LoopForCausalLM"}
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
    # Inkling 2 (inkling2.py): L2 clips, attention residuals over blocks of layers, softcapped experts, its vocabularies
    qk_clip: Optional[float] = None    # each q and k head's largest L2 norm
    rel_clip: Optional[float] = None   # each relative-state head's
    res_block: int = 0                 # layers per attention-residual block (0: Inkling's plain residual stream)
    gate_softcap: Optional[float] = None   # the experts' gate factor's and up projection's soft caps
    up_softcap: Optional[float] = None
    embed_rows: int = 0                # the embedding's rows: vocab_size, the logits' unpadded_vocab_size or fewer
    # Inkling 2 Loop: layers start..end-1 run `passes` times, each pass after the first on its own KV and convolution
    # states (ModelConfig.num_layers counts them), gated by messages of rank `gate_rank` from the pass before
    loop: tuple = ()                   # (start, end, passes, gate_rank), () for none

    def kv_layers(self, layers: int) -> int:
        """The KV (and convolution-state) layers of `layers` checkpoint layers: a loop pass after the first has its
        own."""
        if not self.loop:
            return layers
        start, end, passes, _ = self.loop
        return layers + (passes - 1) * (end - start)

    def shape(self, layer: int) -> tuple:
        return self.swa_shape if layer in self.sliding_layers else self.full_shape

    def kv_width(self, layer: int) -> int:
        _, kv_heads, head_dim = self.shape(layer)
        return kv_heads * head_dim


def inkling_view(hf_config) -> FieldsView:
    """hf_config as from_hf reads it: the pool's one head of the widest layer's K, no rope, no window of its own;
    the vocabulary the logits' (unpadded_vocab_size where set: Inkling's where below vocab_size, Inkling 2's head),
    the embedding's rows embed_rows."""
    widest = max(int(hf_config.swa_num_key_value_heads) * int(hf_config.swa_head_dim),
                 int(hf_config.num_key_value_heads) * int(hf_config.head_dim))
    fields = dict(num_key_value_heads=1, head_dim=widest, rope_parameters=None, rope_scaling=None,
                  sliding_window=None, attention_bias=False, mlp_bias=False, tie_word_embeddings=False)
    vocab, unpadded = int(hf_config.vocab_size), getattr(hf_config, "unpadded_vocab_size", None)
    if unpadded is not None:
        inkling1 = hf_config.model_type == "inkling_text"   # its head has vocab_size rows, its logits cut to unpadded
        fields["vocab_size"] = min(int(unpadded), vocab) if inkling1 else int(unpadded)
    return FieldsView(hf_config, {**fields, "embed_rows": vocab})


def with_inkling(config, hf_config):
    """ModelConfig `config` with its InklingLayout; ValueError for what the layers do not run."""
    import dataclasses

    arch, n = config.architecture, config.num_layers
    if arch != "InklingForCausalLM":
        return _with_inkling2(config, hf_config)
    types, mlps = list(hf_config.layer_types or ()), list(hf_config.mlp_layer_types or ())
    if len(types) != n or set(types) - {_SLIDING, _FULL}:
        raise ValueError(f"{arch}: layer_types must name {_SLIDING!r} or {_FULL!r} for each of the {n} layers")
    if len(mlps) != n or set(mlps) - {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {n} layers")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"{arch}: hidden_act {hf_config.hidden_act!r} is not supported; only 'silu'")
    experts, k, shared = int(hf_config.n_routed_experts), int(hf_config.num_experts_per_tok), int(
        hf_config.n_shared_experts)
    if "sparse" in mlps and not (1 <= k <= experts and shared >= 1):
        raise ValueError(f"{arch}: experts need 1 <= num_experts_per_tok ({k}) <= n_routed_experts ({experts}) "
                         f"and n_shared_experts >= 1 (got {shared})")
    if not getattr(hf_config, "shared_expert_sink", True):
        raise ValueError(f"{arch}: shared_expert_sink=False is not supported (HF's router weighs them anyway)")
    layout = InklingLayout(
        **_attention_fields(arch, hf_config, types),
        sparse_layers=tuple(i for i, t in enumerate(mlps) if t == "sparse"),
        experts=experts, top_k=k, shared_experts=shared, expert_intermediate=int(hf_config.moe_intermediate_size),
        route_scale=float(hf_config.route_scale), logits_divisor=float(hf_config.logits_mup_width_multiplier),
        embed_rows=int(hf_config.embed_rows))
    return dataclasses.replace(config, inkling=layout)


def _attention_fields(arch: str, hf_config, types: list) -> dict:
    """Both generations' attention and convolution fields of InklingLayout."""
    shapes = [(int(getattr(hf_config, p + "num_attention_heads")), int(getattr(hf_config, p + "num_key_value_heads")),
               int(getattr(hf_config, p + "head_dim"))) for p in ("swa_", "")]
    for heads, kv_heads, _ in shapes:
        if heads % kv_heads:
            raise ValueError(f"{arch}: {heads} attention heads are not a multiple of {kv_heads} key/value heads")
    kernel, floor = int(hf_config.conv_kernel_size), hf_config.log_scaling_n_floor
    if kernel < 1 or int(hf_config.sliding_window_size) < 1 or int(hf_config.rel_extent) < 1:
        raise ValueError(f"{arch}: conv_kernel_size, sliding_window_size and rel_extent must be at least 1")
    return dict(sliding_layers=tuple(i for i, t in enumerate(types) if t == _SLIDING),
                window=int(hf_config.sliding_window_size), swa_shape=shapes[0], full_shape=shapes[1],
                d_rel=int(hf_config.d_rel), rel_extent=int(hf_config.rel_extent),
                log_floor=None if floor is None else int(floor), log_alpha=float(hf_config.log_scaling_alpha),
                conv_kernel=kernel)


def _with_inkling2(config, hf_config):
    """Inkling 2: every layer's MLP the experts (no shared ones), sigmoid-routed; logits soft-capped."""
    import dataclasses

    arch, n = config.architecture, config.num_layers
    types = list(hf_config.layer_types or ())
    if len(types) != n or set(types) - {_SLIDING, _FULL}:
        raise ValueError(f"{arch}: layer_types must name {_SLIDING!r} or {_FULL!r} for each of the {n} layers")
    if getattr(hf_config, "scoring_func", "sigmoid") != "sigmoid":
        raise ValueError(f"{arch}: scoring_func {hf_config.scoring_func!r} is not supported; only 'sigmoid'")
    experts, k, block = int(hf_config.n_routed_experts), int(hf_config.num_experts_per_tok), int(
        hf_config.n_layers_per_attn_res_block)
    if not 1 <= k <= experts or block < 1:
        raise ValueError(f"{arch}: need 1 <= num_experts_per_tok ({k}) <= n_routed_experts ({experts}) and "
                         f"n_layers_per_attn_res_block ({block}) >= 1")
    layout = InklingLayout(
        **_attention_fields(arch, hf_config, types), sparse_layers=tuple(range(n)), experts=experts, top_k=k,
        shared_experts=0, expert_intermediate=int(hf_config.moe_intermediate_size),
        route_scale=float(hf_config.route_scale), logits_divisor=1.0, qk_clip=float(hf_config.qk_l2_clip_threshold),
        rel_clip=float(hf_config.rel_l2_clip_threshold), res_block=block,
        gate_softcap=float(hf_config.mlp_gate_softcap), up_softcap=float(hf_config.mlp_up_softcap),
        embed_rows=int(hf_config.embed_rows))
    if arch == "Inkling2LoopForCausalLM":
        layout = dataclasses.replace(layout, loop=_loop(arch, hf_config, n, block))
    softcap = hf_config.final_logit_softcapping
    return dataclasses.replace(config, inkling=layout, final_softcap=float(softcap) if softcap else None,
                               num_layers=layout.kv_layers(n))


def _loop(arch: str, hf_config, n: int, block: int) -> tuple:
    start, end = int(hf_config.loop_layer_index_start), int(hf_config.loop_layer_index_end)
    passes, rank = int(hf_config.loop_num_passes), int(hf_config.loop_gate_rank)
    if not (0 < start < end <= n and start % block == 0 and end % block == 0 and passes >= 1 and rank >= 1):
        raise ValueError(f"{arch}: the loop (loop_layer_index_start {start}, loop_layer_index_end {end}, "
                         f"loop_num_passes {passes}, loop_gate_rank {rank}) must be whole blocks of "
                         f"n_layers_per_attn_res_block ({block}) inside the {n} layers after the first, run at "
                         f"least once")
    return start, end, passes, rank
