"""Mistral Large 4's language model (HF MistralLarge4TextModel, served under MistralLarge4ForConditionalGeneration for
text prompts: multimodal_wrappers.py) as ModelConfig fields.  Its attention is DeepSeek-V3.2's sparse multi-head latent
attention (mla_config.py, dsa_config.py) without a low-rank query, and:
  - layers with no_rope_layers[i] == 0 rotate nothing: their queries and latent keys are all "nope" dims (nope_layers);
  - a layer whose kv_source_layers entry is an earlier layer computes no latent KV and attends over that layer's;
  - the rope's inverse frequencies are YaRN's times exp(alpha), alpha a learned vector (LeRoPE);
  - each head's query times scale_h * log(position + 1) + bias_h, both learned;
  - kv_a_layernorm's eps is rms_norm_eps, the router's softmax runs in float32 with its top-k always renormalised,
    and the logits are soft-capped at final_logit_softcapping (the conditional-generation model's head).
As for the other DSA families, the served context is capped at index_topk, within which the indexer chooses every
token and is not run (dsa_config.py).  No torch here (config.py's rule).
"""

import dataclasses
import logging
import re
from typing import Any, Dict, Optional

logger = logging.getLogger(__name__)

MISTRAL_LARGE4_TEXT = "MistralLarge4TextForCausalLM"
MISTRAL_LARGE4_MODEL_TYPES = {"mistral_large4_text": MISTRAL_LARGE4_TEXT}


def _mistral_large4_text(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    rope_flags = list(hf_config.no_rope_layers)[:n]
    if len(rope_flags) < n or set(rope_flags) - {0, 1}:
        raise ValueError(f"{arch}: no_rope_layers {hf_config.no_rope_layers!r} must give 0 or 1 for each of {n} layers")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    nope = tuple(i for i in range(n) if not rope_flags[i])
    source = tuple(int(s) for s in hf_config.kv_source_layers)
    _check_sources(arch, source, nope)
    cap = float(hf_config.final_logit_softcapping)
    if cap <= 0:
        raise ValueError(f"{arch}: final_logit_softcapping {cap} must be positive (HF divides the logits by it)")
    kinds = list(getattr(hf_config, "mlp_layer_types", None) or [])
    if len(kinds) != n or set(kinds) - {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {n} layers")
    return dict(nope_layers=nope, final_softcap=cap, kv_source_layers=source)


def _check_sources(arch: str, source: tuple, nope: tuple) -> None:
    """HF's reusing layer reads the KV that the last earlier "store" layer of its own kind (rope or NoPE) left, not
    its kv_source_layers entry's: refused where the two differ."""
    n = len(source)
    stores = [i for i in range(n) if i in source[i + 1:]]
    for i, s in enumerate(source):
        if s == i:
            continue
        if s > i or source[s] != s:
            raise ValueError(f"{arch}: kv_source_layers[{i}] = {s} must be an earlier layer that owns its KV")
        kind = i in nope
        latest = max((p for p in stores if p < i and (p in nope) == kind), default=None)
        if latest != s:
            raise ValueError(f"{arch}: kv_source_layers[{i}] = {s}, but HF's layer {i} reads the KV of layer {latest} "
                             "(the last earlier layer of its kind that shares its KV)")


def with_mistral_large4(config, hf_config):
    """with_mla's config with the context capped at index_topk (dsa_config.py's reason)."""
    topk = int(hf_config.index_topk)
    if topk < 1:
        raise ValueError(f"{config.architecture}: index_topk {topk} must be at least 1")
    if config.context_length > topk:
        logger.info("%s: context capped at index_topk %d tokens (from %d): the lightning indexer, which would choose "
                    "among more, is not run", config.architecture, topk, config.context_length)
    return dataclasses.replace(config, context_length=min(config.context_length, topk))


MISTRAL_LARGE4_FIELDS = {MISTRAL_LARGE4_TEXT: _mistral_large4_text}

# Mistral's own names (its checkpoints', which transformers saves too) -> HF's, after multimodal_text's prefixes
_NATIVE_OUTER = {"tok_embeddings.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
                 "lerope.alpha": "model.rotary_emb.alpha"}
_NATIVE_LAYER = re.compile(r"^(model\.layers\.\d+\.)(attention|attention_norm|ffn_norm|feed_forward|gate|experts|"
                           r"shared_experts)\.(.*)$")
_NATIVE_MODULES = {"attention": "self_attn", "attention_norm": "input_layernorm",
                   "ffn_norm": "post_attention_layernorm", "feed_forward": "mlp", "gate": "mlp.gate",
                   "experts": "mlp.experts", "shared_experts": "mlp.shared_experts"}
_NATIVE_LEAVES = {"wq.": "q_proj.", "wkv_a_with_mqa.": "kv_a_proj_with_mqa.", "wkv_b.": "kv_b_proj.", "wo.": "o_proj.",
                  "kv_a_norm.": "kv_a_layernorm.", "ssmax_scaling.s": "softmax_scaling.scale",
                  "ssmax_scaling.b": "softmax_scaling.bias"}
_NATIVE_MLP = {"w1.": "gate_proj.", "w2.": "down_proj.", "w3.": "up_proj."}


def mistral_large4_text_name(name: str) -> Optional[str]:
    """A language-model name in Mistral's form as HF names it (None for the draft head, which HF ignores); HF's own
    names unchanged."""
    if name.startswith("mtp_dspark."):
        return None
    if name in _NATIVE_OUTER:
        return _NATIVE_OUTER[name]
    native = _NATIVE_LAYER.match(name)
    if native is None:
        return name
    prefix, module, rest = native.groups()
    if module == "attention" and not rest.startswith("indexer."):
        rest = _renamed(rest, _NATIVE_LEAVES)
    elif module == "experts":   # experts.{e}.w1.weight
        expert, _, leaf = rest.partition(".")
        rest = f"{expert}.{_renamed(leaf, _NATIVE_MLP)}"
    elif module in ("feed_forward", "shared_experts"):
        rest = _renamed(rest, _NATIVE_MLP)
    return f"{prefix}{_NATIVE_MODULES[module]}.{rest}"


def _renamed(leaf: str, renames: dict) -> str:
    return next((new + leaf[len(old):] for old, new in renames.items() if leaf.startswith(old)), leaf)
