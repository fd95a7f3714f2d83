"""Qwen4-Exp's fields (no torch; HF Qwen4ExpForCausalLM, its text model; registered through linear_hybrid_config.py):
Qwen3.5-MoE's gated delta nets, gated attention and experts (linear_attention_config.py, moe_config.py's Qwen2-MoE
rule on every layer) over hc_count residual streams joined by hyper-connections (HyperConnections), without the
per-layer norms and the final norm of Qwen3.5.

Its attention layers ("indexed_attention", the checkpoints' "full_attention") attend through a QSA indexer: each query
keeps the indexer_budget / indexer_compress_ratio best blocks of indexer_compress_ratio keys, plus its incomplete last
block.  Up to indexer_budget keys that is every key, so the context is capped there and the indexer is not run (as
dsa_config.py caps DeepSeek's sparse attention).  Refused: Per-Layer Embeddings (ple_layer_ids) and a sigmoid output
gate in the delta nets (output_gate_type).
"""

import dataclasses
import logging
from dataclasses import dataclass

from .linear_attention_config import with_linear_attention
from .mamba_stack_config import FieldsView
from .moe_config import MoEConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HyperConnections:
    streams: int     # hc_count residual streams of hidden_size each
    rank: int        # hc_lowrank: the width of the input mixer's low-rank projection


def qwen4_exp_view(hf_config) -> FieldsView:
    """hf_config as ModelConfig.from_hf reads it: the attention layers under Qwen3.5's name, no sliding window, the
    experts' width as the MLP's (every layer has experts), the rope without its partial factor (with_qwen4_exp's)."""
    types = ["full_attention" if t == "indexed_attention" else t for t in hf_config.layer_types]
    rope = {k: v for k, v in (hf_config.rope_parameters or {}).items() if k != "partial_rotary_factor"}
    return FieldsView(hf_config, {"layer_types": types, "sliding_window": None, "rope_parameters": rope,
                                  "intermediate_size": hf_config.moe_intermediate_size})


def with_qwen4_exp(config, view):
    """ModelConfig `config` of a Qwen4-Exp with its delta nets, rotary, experts and hyper-connections; ValueError
    naming the field the layers do not run."""
    hf, arch, n = view.hf_config, config.architecture, config.num_layers
    if hf.ple_layer_ids:
        raise ValueError(f"{arch}: ple_layer_ids (Per-Layer Embeddings) is not supported")
    if (hf.output_gate_type or hf.hidden_act) != "silu":
        raise ValueError(f"{arch}: output_gate_type {hf.output_gate_type!r} is not supported (silu only)")
    config = with_linear_attention(dataclasses.replace(config, architecture="Qwen3_5MoeForCausalLM"), view)
    params = dict(getattr(hf, "rope_parameters", None) or {})
    rotary = int(config.head_dim * float(params.get("partial_rotary_factor", 1.0)))
    moe = MoEConfig(num_experts=int(hf.num_experts), top_k=int(hf.num_experts_per_tok),
                    intermediate_size=int(hf.moe_intermediate_size), norm_topk_prob=bool(hf.norm_topk_prob),
                    sparse_layers=tuple(range(n)), shared_expert_intermediate_size=int(hf.shared_expert_intermediate_size))
    context = config.context_length
    if config.kv_layers and hf.indexer_budget:
        budget = int(hf.indexer_budget)
        if context > budget:
            logger.info("%s: context capped at indexer_budget %d tokens (from %d): the QSA indexer, which would choose "
                        "among more, is not run", arch, budget, context)
        context = min(context, budget)
    return dataclasses.replace(config, architecture=arch, rotary_dim=rotary, moe=moe, context_length=context,
                               hyper=HyperConnections(int(hf.hc_count), int(hf.hc_lowrank)))
