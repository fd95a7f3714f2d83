"""The Hugging Face config fields of the ALiBi families (BLOOM: HF BloomForCausalLM, MPT: HF MptForCausalLM) as
ModelConfig fields (family_config.py's contract), and the per-head slopes of their linear position biases
(config.alibi_slopes: head h's score of the key at position j for the query at position p gains slope_h * (j - p);
the attention backend adds it, see set_layer_variants).  No torch here.

Neither config names a context length: alibi_view gives from_hf BLOOM's seq_length (2048 where unset; HF itself has
no limit) and MPT's max_seq_len (the rows of HF's bias table).
"""

import math
from typing import Any, Dict, Tuple

from .mamba_stack_config import FieldsView

BLOOM_CONTEXT = 2048   # BLOOM's training length, where a config names no seq_length


def bloom_slopes(num_heads: int) -> Tuple[float, ...]:
    """HF BLOOM's slopes: for the largest power of two n <= num_heads, 2 ** (-8k / n) for k = 1..n; the remaining
    heads take the odd powers 2 ** (-4k / n), k = 1, 3, 5, ... (those of 2n heads that the first n lack)."""
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]
    extra = min(n, num_heads - n)
    return tuple(slopes + [2.0 ** (-4.0 * k / n) for k in range(1, 2 * extra, 2)])


def mpt_slopes(num_heads: int, bias_max: float = 8.0) -> Tuple[float, ...]:
    """HF MPT's slopes: for n the power of two >= num_heads, 2 ** (-k * bias_max / n) for k = 1..n; with fewer heads
    than n, the odd k first, then the even ones, the first num_heads of them."""
    n = 2 ** math.ceil(math.log2(num_heads))
    slopes = [2.0 ** (-k * bias_max / n) for k in range(1, n + 1)]
    if n != num_heads:
        slopes = slopes[1::2] + slopes[::2]
    return tuple(slopes[:num_heads])


def _bloom(arch: str, hf_config) -> Dict[str, Any]:
    """BLOOM: a LayerNorm on the word embeddings, pre-LayerNorms, a fused query_key_value with each head's q, k and v
    rows together, biases everywhere, the tanh-gelu MLP of 4 * hidden, ALiBi, the lm head tied."""
    if getattr(hf_config, "apply_residual_connection_post_layernorm", False):
        raise ValueError(f"{arch}: apply_residual_connection_post_layernorm=True is not supported")
    hidden, heads = int(hf_config.hidden_size), int(hf_config.n_head)
    if hidden % heads:
        raise ValueError(f"{arch}: hidden_size {hidden} is not a multiple of n_head {heads}")
    return dict(nope_layers=tuple(range(int(hf_config.n_layer))), hidden_act="gelu_tanh", intermediate_size=4 * hidden,
                rms_norm_eps=float(hf_config.layer_norm_epsilon), attention_bias=True, o_proj_bias=True, mlp_bias=True,
                alibi_slopes=bloom_slopes(heads))


def _attn_config(hf_config) -> dict:
    attn = getattr(hf_config, "attn_config", None) or {}
    return dict(attn) if isinstance(attn, dict) else attn.to_dict()


def _mpt(arch: str, hf_config) -> Dict[str, Any]:
    """MPT as HF runs it: no biases, LayerNorms without bias, Wqkv = [q; k; v] rows clamped to +-clip_qkv, scores
    scaled by softmax_scale (head_dim ** -0.5 where unset), ALiBi with bias_max 8, the exact-gelu MLP of 4 * hidden,
    the lm head tied.  Options HF's model ignores (it would run a checkpoint trained with them wrongly) are refused."""
    attn = _attn_config(hf_config)
    refused = {"alibi": (attn.get("alibi", True), True), "alibi_bias_max": (attn.get("alibi_bias_max", 8), 8),
               "qk_ln": (attn.get("qk_ln", False), False), "prefix_lm": (attn.get("prefix_lm", False), False),
               "attn_uses_sequence_id": (attn.get("attn_uses_sequence_id", False), False),
               "attn_type": (attn.get("attn_type", "multihead_attention"), "multihead_attention"),
               "no_bias": (getattr(hf_config, "no_bias", True), True),
               "expansion_ratio": (getattr(hf_config, "expansion_ratio", 4), 4),
               "logit_scale": (getattr(hf_config, "logit_scale", None), None)}
    for name, (value, supported) in refused.items():
        if value != supported:
            raise ValueError(f"{arch}: {name}={value!r} is not supported (transformers' MPT runs only {supported!r})")
    hidden, heads = int(hf_config.hidden_size), int(hf_config.n_heads)
    if hidden % heads:
        raise ValueError(f"{arch}: d_model {hidden} is not a multiple of n_heads {heads}")
    clip, scale = attn.get("clip_qkv"), attn.get("softmax_scale")
    return dict(nope_layers=tuple(range(int(hf_config.n_layers))), hidden_act="gelu", intermediate_size=4 * hidden,
                rms_norm_eps=float(hf_config.layer_norm_epsilon), attention_bias=False, o_proj_bias=False,
                mlp_bias=False, clip_qkv=float(clip) if clip else None,
                attention_multiplier=float(scale) if scale else None, alibi_slopes=mpt_slopes(heads))


def alibi_view(arch: str, hf_config):
    """hf_config as from_hf reads it: the ALiBi families' context length as max_position_embeddings."""
    if arch == "BloomForCausalLM":
        return FieldsView(hf_config, {"max_position_embeddings": int(getattr(hf_config, "seq_length", None)
                                                                     or BLOOM_CONTEXT)})
    if arch == "MptForCausalLM":
        return FieldsView(hf_config, {"max_position_embeddings": int(hf_config.max_seq_len)})
    return hf_config


ALIBI_FIELDS = {"BloomForCausalLM": _bloom, "MptForCausalLM": _mpt}
ALIBI_MODEL_TYPES = {"bloom": "BloomForCausalLM", "mpt": "MptForCausalLM"}
