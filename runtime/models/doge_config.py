"""Doge's fields (HF DogeForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch here.

Doge's attention (dynamic mask attention) adds to each score a bias per key and KV head, dt = exp(A * softplus(
dt_proj(v))) of the key's value, and keeps per query only the keep_window_size keys of the largest biases: within
keep_window_size visible keys that keeps them all, so the served context is capped there (view(), logged).  The
pool holds each key with one more dim, dt * sqrt(head_dim), met by a query dim of 1 (doge.py): ModelConfig.head_dim is
head_dim + 1, the score scale head_dim ** -0.5 and the rotated dims head_dim.  Queries and keys have per-head RMSNorms
before rope; each sublayer's residual is scaled per channel (input_residual, post_attention_residual).

Its cross-domain mixture of experts (is_moe) is refused: HF's router reshapes the router logits of a whole forward
pass as view(2, tokens, keys), mixing logits of different tokens in a prefill (not causal), which chunked prefills
and the prefix cache cannot reproduce.
"""

import logging
from dataclasses import dataclass
from typing import Any, Dict

from .mamba_stack_config import FieldsView

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DogeAttention:
    head_dim: int   # the model's own; ModelConfig.head_dim is one more (the pooled bias dim)


def _doge(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "is_moe", False):
        raise ValueError(f"{arch}: is_moe=True is not supported: its router mixes the router logits of different tokens "
                         "of one forward pass (view(2, tokens, keys)), which a paged server cannot reproduce")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"{arch}: only the silu activation is supported, got {hf_config.hidden_act!r}")
    head_dim = int(hf_config.hidden_size) // int(hf_config.num_attention_heads)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(head_dim=head_dim + 1, rotary_dim=head_dim, attention_multiplier=head_dim ** -0.5, qk_norm=True,
                attention_bias=bias, o_proj_bias=bias, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
                doge=DogeAttention(head_dim))


def view(hf_config):
    """hf_config with max_position_embeddings capped at keep_window_size."""
    keep, max_pos = int(hf_config.keep_window_size), int(hf_config.max_position_embeddings)
    if max_pos <= keep:
        return hf_config
    logger.info("DogeForCausalLM: context capped at keep_window_size %d (from %d): the dynamic selection of keys past "
                "it is not run", keep, max_pos)
    return FieldsView(hf_config, {"max_position_embeddings": keep})


DOGE_FIELDS = {"DogeForCausalLM": _doge}
DOGE_MODEL_TYPES = {"doge": "DogeForCausalLM"}
