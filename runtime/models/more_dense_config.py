"""The Hugging Face config fields of Cohere 2 (Command R7B, Command A), CWM (Code World Model), Jais 2, HyperCLOVA X and
DiffLlama, as ModelConfig fields (family_config.py's contract: each reader returns the keyword arguments ModelConfig.from_hf adds
or overrides).  No torch here.

Their sliding windows come from layer_types by config.py's generic reading (dropped where the window covers the whole
context); what rotates does not depend on that.
"""

import dataclasses
from typing import Any, Dict

from .llama_like_config import _granite, _only_activation

MORE_DENSE_MODEL_TYPES = {"cohere2": "Cohere2ForCausalLM", "cwm": "CwmForCausalLM", "jais2": "Jais2ForCausalLM",
                          "hyperclovax": "HyperCLOVAXForCausalLM", "diffllama": "DiffLlamaForCausalLM"}


def _cohere2(arch: str, hf_config) -> Dict[str, Any]:
    """Cohere 2: Cohere's LayerNorms and logit scale without q/k norms; attention_bias on all four projections.  Only
    the sliding layers rotate q and k: the full ones, and every layer of a config without a sliding_window, do not."""
    n = int(hf_config.num_hidden_layers)
    types = list(getattr(hf_config, "layer_types", None) or
                 ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)])
    if len(types) != n or set(types) - {"sliding_attention", "full_attention"}:
        raise ValueError(f"{arch}: unsupported layer_types {types!r}")
    windowed = getattr(hf_config, "sliding_window", None) is not None
    scale = getattr(hf_config, "logit_scale", None)
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(rms_norm_eps=float(hf_config.layer_norm_eps), qk_norm=False, o_proj_bias=bias,
                logit_scale=None if scale is None else float(scale),
                nope_layers=tuple(i for i, t in enumerate(types) if t != "sliding_attention" or not windowed))


def _cwm(arch: str, hf_config) -> Dict[str, Any]:
    """CWM: Llama's layer (no attention biases whatever the config says, mlp_bias on the MLP) with sliding and full
    layers (layer_types) and llama3 rope, both read by config.py."""
    return dict(attention_bias=False, o_proj_bias=False, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)))


def _jais2(arch: str, hf_config) -> Dict[str, Any]:
    """Jais 2: LayerNorms with biases (layer_norm_eps), attention_bias on all four projections, a non-gated relu^2 MLP
    with biases where mlp_bias."""
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(hidden_act=_only_activation(arch, hf_config, "relu2"), rms_norm_eps=float(hf_config.layer_norm_eps),
                attention_bias=bias, o_proj_bias=bias, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)))


def _hyperclovax(arch: str, hf_config) -> Dict[str, Any]:
    """HyperCLOVA X: Granite's multipliers, except that the logits are multiplied by logits_scaling (held as its
    inverse: ModelConfig divides); an RMSNorm on each sublayer's output where use_post_norm; attention_bias on all
    four projections, mlp_bias on the gated MLP."""
    fields = _granite(hf_config)
    if not fields["logits_scaling"]:
        raise ValueError(f"{arch}: logits_scaling must not be 0")
    bias = bool(getattr(hf_config, "attention_bias", False))
    return dict(fields, logits_scaling=1.0 / fields["logits_scaling"], o_proj_bias=bias,
                mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
                sublayer_post_norms=bool(getattr(hf_config, "use_post_norm", True)))


def _diffllama(arch: str, hf_config) -> Dict[str, Any]:
    """DiffLlama: Llama's fields (attention_bias on all four projections); its differential attention splits the
    value heads in two halves, so num_key_value_heads must be even."""
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
    if int(kv_heads) % 2:
        raise ValueError(f"{arch}: num_key_value_heads must be even (its value heads split in two), got {kv_heads}")
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def with_differential_attention(config):
    """DiffLlama's ModelConfig as the KV pool and the attention kernels see it: twice the checkpoint's query and KV
    heads (diffllama.py runs each layer's two attention maps as one call over [q, q], [k, k] and the two halves of
    v); the model reads its weights with the checkpoint's (diffllama.checkpoint_heads)."""
    return dataclasses.replace(config, num_heads=2 * config.num_heads, num_kv_heads=2 * config.num_kv_heads)


MORE_DENSE_FIELDS = {"Cohere2ForCausalLM": _cohere2, "CwmForCausalLM": _cwm, "Jais2ForCausalLM": _jais2,
                     "HyperCLOVAXForCausalLM": _hyperclovax, "DiffLlamaForCausalLM": _diffllama}
