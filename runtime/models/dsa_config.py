"""The DeepSeek Sparse Attention (DSA) families' config fields: DeepSeek-V3.2 (DeepseekV32ForCausalLM), GLM-5
(GlmMoeDsaForCausalLM) and A.X K2 (AXK2ForCausalLM), DeepSeek-V3's multi-head latent attention (mla_config.py) with
a "lightning indexer" in each layer.

Per query token the indexer scores the tokens before it with small index keys and keeps the top index_topk; the
attention sees only those.  HF (eager / SDPA) turns the choice into a mask over the keys: with at most index_topk
tokens in the sequence every token is chosen (topk = min(index_topk, keys)) and the mask leaves the causal one as
it is, so the indexer's projections and norms do not reach the output and dense MLA is exact.  We run no indexer:
the served context is capped at index_topk (a longer prompt gets the usual "longer than the context" error).
GLM-5's "shared" layers (indexer_types) reuse the previous "full" layer's choice, which changes nothing then either.

No torch here (config.py's rule).
"""

import dataclasses
import logging
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger(__name__)

DSA_ARCHITECTURES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "AXK2ForCausalLM")
DSA_MODEL_TYPES = {"deepseek_v32": "DeepseekV32ForCausalLM", "glm_moe_dsa": "GlmMoeDsaForCausalLM",
                   "axk2": "AXK2ForCausalLM"}


@dataclass(frozen=True)
class SparseAttention:
    """The indexer's shapes (its weights are read and dropped: dsa.py) and A.X K2's gated norms."""

    index_topk: int                 # tokens each query attends to; the served context (none past it)
    index_n_heads: int
    index_head_dim: int
    indexer_layers: tuple           # layers with an indexer of their own (GLM-5's others reuse the previous one's)
    gated_norm_rank: Optional[int] = None   # A.X K2: the rank of the sigmoid gate after its RMSNorms


def with_sparse_attention(config, hf_config):
    """config (with_mla's) with the DSA fields and its context capped at index_topk.  ValueError naming the field
    for what HF's models do not build."""
    arch, layers = config.architecture, config.num_layers
    if config.mla.q_lora_rank is None:
        raise ValueError(f"{arch}: q_lora_rank is required (the indexer reads the query's low-rank bottleneck)")
    topk = int(hf_config.index_topk)
    if topk < 1:
        raise ValueError(f"{arch}: index_topk {topk} must be at least 1")
    kinds = list(getattr(hf_config, "indexer_types", None) or ["full"] * layers)   # GLM-5's; the others: every layer
    if len(kinds) < layers or set(kinds) - {"full", "shared"} or kinds[0] != "full":
        raise ValueError(f"{arch}: indexer_types {kinds!r} must give each of the {layers} layers 'full' or 'shared', "
                         "the first 'full'")
    rank = getattr(hf_config, "gated_norm_rank", None) if arch == "AXK2ForCausalLM" else None
    dsa = SparseAttention(index_topk=topk, index_n_heads=int(hf_config.index_n_heads),
                          index_head_dim=int(hf_config.index_head_dim),
                          indexer_layers=tuple(i for i in range(layers) if kinds[i] == "full"),
                          gated_norm_rank=None if rank is None else int(rank))
    if config.context_length > topk:
        logger.info("%s: context capped at index_topk %d tokens (from %d): the lightning indexer, which would choose "
                    "among more, is not run", arch, topk, config.context_length)
    return dataclasses.replace(config, context_length=min(config.context_length, topk), dsa=dsa)
