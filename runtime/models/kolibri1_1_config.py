"""Kolibri 1.1's fields (HF Kolibri1_1ForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch.

Kolibri 1's four-norm layer and routing (kolibri.py, moe_config.py) over two layer kinds (layer_types): sliding-window
layers with rope, and indexed-attention layers without rope whose keys and values are rounded to NVFP4 (kolibri1_1.py)
and whose indexer selects the keys each query attends to.  A query that sees no more than index_topk +
index_num_local_tokens + index_num_sink_tokens keys attends to all of them, so the served context is capped there
(view(): max_position_embeddings, logged) and no indexer runs.  An indexed layer may read the keys and values of an
earlier one (kv_source_layers).  The first mlp_only_layers have a dense MLP of mlp_only_intermediate_size.
"""

import logging
from dataclasses import dataclass
from typing import Any, Dict

from .mamba_stack_config import FieldsView

logger = logging.getLogger(__name__)
INDEXED, SLIDING = "indexed_attention", "sliding_attention"


@dataclass(frozen=True)
class Kolibri11Layers:
    kv_source: tuple        # per layer: the layer whose keys and values it attends to (its own, or an earlier one's)
    indexed: tuple          # the indexed-attention layers (no rope; keys and values rounded to NVFP4)
    dense_layers: tuple     # mlp_only_layers
    dense_intermediate_size: int

    def reuses_kv(self, layer_id: int) -> bool:
        return self.kv_source[layer_id] != layer_id


def dense_budget(hf_config) -> int:
    """The most keys a query of an indexed layer attends to without its indexer choosing among them."""
    return int(hf_config.index_topk) + int(hf_config.index_num_local_tokens) + int(hf_config.index_num_sink_tokens)


def view(hf_config):
    """hf_config with max_position_embeddings capped at the dense budget."""
    budget, max_pos = dense_budget(hf_config), int(hf_config.max_position_embeddings)
    if max_pos <= budget:
        return hf_config
    logger.info("Kolibri1_1ForCausalLM: context capped at %d tokens (index_topk + local + sink tokens, from %d): "
                "the indexers, which would choose among more keys, are not run", budget, max_pos)
    return FieldsView(hf_config, {"max_position_embeddings": budget})


def _kolibri1_1(arch: str, hf_config) -> Dict[str, Any]:
    types = list(hf_config.layer_types)
    if set(types) - {INDEXED, SLIDING}:
        raise ValueError(f"{arch}: layer_types {sorted(set(types))} are not supported")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    window = getattr(hf_config, "sliding_window", None)
    layers = Kolibri11Layers(kv_source=tuple(int(s) for s in hf_config.kv_source_layers),
                             indexed=tuple(i for i, t in enumerate(types) if t == INDEXED),
                             dense_layers=tuple(int(i) for i in hf_config.mlp_only_layers or ()),
                             dense_intermediate_size=int(hf_config.mlp_only_intermediate_size))
    return dict(qk_norm=True, nope_layers=layers.indexed, kolibri1_1=layers,
                layer_windows=tuple(int(window) if t == SLIDING and window else None for t in types))


KOLIBRI1_1_FIELDS = {"Kolibri1_1ForCausalLM": _kolibri1_1}
KOLIBRI1_1_MODEL_TYPES = {"kolibri1_1": "Kolibri1_1ForCausalLM"}
