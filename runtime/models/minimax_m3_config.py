"""MiniMax-M3's language model (HF MiniMaxM3VLForCausalLM, model_type minimax_m3_vl_text) as ModelConfig fields
(family_config.py's contract; its experts: moe_reader, through dsv4_moe_config.py).  No torch here.

Each layer: Gemma-style (1 + weight) RMSNorms, attention with per-head (1 + weight) q/k norms before rope (the first
head_dim * rope_parameters' partial_rotary_factor dims rotate; the config's rotary_dim field is not read by HF's
model), then by mlp_layer_types a dense MLP of dense_intermediate_size or a sparse block: a router in the model dtype,
sigmoid scores, e_score_correction_bias for the choice only, the top num_experts_per_tok renormalised, times
routed_scaling_factor, plus one un-gated shared MLP of shared_intermediate_size.  Every MLP (experts, shared, dense) is
the clamped SwiGLU (gate <= swiglu_limit, |up| <= swiglu_limit, (up + 1) * gate * sigmoid(swiglu_alpha * gate)), its
gate rows then its up rows.

Sparse attention (layer_types "minimax_m3_sparse"): HF's lightning indexer scores the keys of each query, max-pools them
into blocks of index_block_size keys, and keeps the top index_topk_blocks blocks (the query's own index_local_blocks
always among them): topk = min(index_topk_blocks, blocks), so with at most index_block_size * index_topk_blocks keys
every block at or before the query is kept and its mask is the causal one.  We run no indexer: where a layer is
sparse the served context is capped at that many tokens (view(), logged), and dense attention is exact.
"""

import copy
import logging
from dataclasses import dataclass
from typing import Any, Dict

logger = logging.getLogger(__name__)
ARCH = "MiniMaxM3VLForCausalLM"
SPARSE, FULL = "minimax_m3_sparse", "full_attention"


@dataclass(frozen=True)
class MiniMaxM3Layers:
    dense_intermediate_size: int    # the dense layers' MLP width
    sparse_attention_layers: tuple  # the layers with an indexer (not run: the context is capped)
    swiglu_limit: float
    swiglu_alpha: float


def _layer_kinds(hf_config, field: str, kinds: tuple) -> list:
    layers = int(hf_config.num_hidden_layers)
    values = list(getattr(hf_config, field) or ())
    if len(values) != layers or set(values) - set(kinds):
        raise ValueError(f"{ARCH}: {field} {values!r} must give each of the {layers} layers one of {kinds}")
    return values


def dense_budget(hf_config) -> int:
    """The most keys a sparse layer's query attends to all of, its indexer choosing none out."""
    block, topk = int(hf_config.index_block_size), int(hf_config.index_topk_blocks)
    if block < 1 or topk < 1:
        raise ValueError(f"{ARCH}: index_block_size {block} and index_topk_blocks {topk} must be at least 1")
    return block * topk


def view(hf_config):
    """hf_config with max_position_embeddings capped at the dense budget where a layer is sparse."""
    if SPARSE not in _layer_kinds(hf_config, "layer_types", (FULL, SPARSE)):
        return hf_config
    budget, max_pos = dense_budget(hf_config), int(hf_config.max_position_embeddings)
    if max_pos <= budget:
        return hf_config
    logger.info("%s: context capped at %d tokens (index_block_size * index_topk_blocks, from %d): the lightning "
                "indexers, which would choose among more key blocks, are not run", ARCH, budget, max_pos)
    capped = copy.copy(hf_config)   # not mamba_stack_config's FieldsView: moe_config.py imports this module
    capped.max_position_embeddings = budget
    return capped


def _rope(hf_config, head_dim: int) -> Dict[str, Any]:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if (params.get("rope_type") or "default") != "default":
        raise ValueError(f"{ARCH}: rope_parameters rope_type {params.get('rope_type')!r} is not supported "
                         "(default only)")
    partial = float(params.get("partial_rotary_factor", 1.0) or 1.0)
    dim = int(head_dim * partial)
    if dim <= 0 or dim % 2:
        raise ValueError(f"{ARCH}: partial_rotary_factor {partial} gives {dim} rotated dims of {head_dim}: need an "
                         "even number above 0")
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    return dict(rope_params={"rope_type": "default", "rope_theta": float(theta)},
                rotary_dim=None if dim == head_dim else dim)


def _minimax_m3(arch: str, hf_config) -> Dict[str, Any]:
    types = _layer_kinds(hf_config, "layer_types", (FULL, SPARSE))
    _layer_kinds(hf_config, "mlp_layer_types", ("sparse", "dense"))
    if SPARSE in types:
        dense_budget(hf_config)
        heads, index_heads = int(hf_config.num_attention_heads), int(hf_config.index_n_heads)
        if index_heads < 1 or heads % index_heads:
            raise ValueError(f"{ARCH}: index_n_heads {index_heads} must divide num_attention_heads {heads} (HF's "
                             "block mask gives each indexer head's choice to as many query heads)")
    head_dim = int(getattr(hf_config, "head_dim", None)
                   or hf_config.hidden_size // hf_config.num_attention_heads)
    layers = MiniMaxM3Layers(dense_intermediate_size=int(hf_config.dense_intermediate_size),
                             sparse_attention_layers=tuple(i for i, t in enumerate(types) if t == SPARSE),
                             swiglu_limit=float(hf_config.swiglu_limit), swiglu_alpha=float(hf_config.swiglu_alpha))
    return dict(qk_norm=True, minimax_m3=layers, **_rope(hf_config, head_dim))


def moe_reader(cls, hf_config, deepseek_style):
    """The experts (moe_config.py's MoEConfig; the module docstring's rules)."""
    return cls(num_experts=int(hf_config.num_local_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.intermediate_size), norm_topk_prob=True,
               sparse_layers=tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse"),
               shared_expert_intermediate_size=int(hf_config.shared_intermediate_size or 0), shared_expert_gate=False,
               swiglu_limit=float(hf_config.swiglu_limit), swiglu_alpha=float(hf_config.swiglu_alpha),
               scoring="sigmoid", correction_bias=True, routed_scaling_factor=float(hf_config.routed_scaling_factor))


MINIMAX_M3_FIELDS = {ARCH: _minimax_m3}
MINIMAX_M3_MODEL_TYPES = {"minimax_m3_vl_text": ARCH}
