"""The Hugging Face config fields of Cohere 2 MoE, BitNet b1.58, Emu3's text model and Aria's text model, as ModelConfig
fields (family_config.py's contract).  No torch here.

- Cohere 2 MoE (Cohere2MoeForCausalLM): Cohere 2's parallel layers (more_dense_config._cohere2) whose MLP is, on the
  "sparse" layers of mlp_layer_types, Mixtral-style experts (moe_config.py) with optional un-gated shared experts
  (summed with, or averaged with, the routed ones); the "dense" layers have an MLP of prefix_dense_intermediate_size.
  Its norms are RMSNorms where rms_norm_eps is set, Cohere's LayerNorms (layer_norm_eps) otherwise.  Besides the
  sliding layers, the dense layers rotate q and k too where prefix_dense_sliding_window_pattern is 1.
- BitNet (BitNetForCausalLM): Llama's layer with an RMSNorm on the attention output before o_proj and on the gated
  relu^2 MLP's product before down_proj (bitnet.py).  Float weights only: a packed ternary checkpoint is refused.
- Emu3 (Emu3ForCausalLM): Llama's layer as it is (its dropout is inactive when serving).
- Aria (AriaTextForCausalLM): Llama's attention over experts on every layer plus un-gated shared experts (aria.py).
- Cohere Compass (CohereCompassForCausalLM, North's text model): Cohere 2's parallel layers with rotate-half rope, a
  rope base per layer kind (rope_parameters[kind]; None: that kind does not rotate, config.layer_rope_thetas 0), its
  sliding layers windowed, logits times logit_scale where set (cohere_compass.py).  With text only, its M-RoPE
  sections all read the same position: plain rope.
- Apertus 1.5 (Apertus1p5TextForCausalLM): Apertus (llama_like.py) whose lm head may keep only the first
  output_vocab_size rows (the text tokens): served as a model of that vocabulary (pruned_vocabulary), its embeddings'
  other rows (multimodal codes, never a text prompt's) dropped at load.
"""

from dataclasses import dataclass
from typing import Any, Dict

from .llama_like_config import _apertus, _only_activation
from .mamba_stack_config import FieldsView
from .more_dense_config import _cohere2


@dataclass(frozen=True)
class Cohere2MoeLayers:
    rms_norm: bool        # RMSNorms (rms_norm_eps set) instead of Cohere's LayerNorms
    shared_average: bool  # the routed and shared experts' outputs averaged, not summed


def _cohere2_moe(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    kinds = list(hf_config.mlp_layer_types or ["sparse"] * n)
    if len(kinds) != n or set(kinds) - {"dense", "sparse"}:
        raise ValueError(f"{arch}: mlp_layer_types must name 'dense' or 'sparse' for each of the {n} layers")
    _only_activation(arch, hf_config, "silu")
    strategy = getattr(hf_config, "shared_expert_combination_strategy", "average")
    if strategy not in ("sum", "average"):
        raise ValueError(f"{arch}: shared_expert_combination_strategy {strategy!r} is not supported")
    fields = _cohere2(arch, hf_config)
    if getattr(hf_config, "prefix_dense_sliding_window_pattern", 1) == 1:   # HF's force_rope
        dense = {i for i, kind in enumerate(kinds) if kind == "dense"}
        fields["nope_layers"] = tuple(i for i in fields["nope_layers"] if i not in dense)
    rms_eps = getattr(hf_config, "rms_norm_eps", None)
    if rms_eps is not None:
        fields["rms_norm_eps"] = float(rms_eps)
    shared = int(getattr(hf_config, "num_shared_experts", 0) or 0)
    dense_width = getattr(hf_config, "prefix_dense_intermediate_size", None) or hf_config.intermediate_size
    return dict(fields, intermediate_size=int(dense_width),
                cohere2_moe=Cohere2MoeLayers(rms_eps is not None, shared > 0 and strategy == "average"))


def _bitnet(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "quantization_config", None):
        raise ValueError(f"{arch}: packed ternary checkpoints (quantization_config) are not supported; "
                         "only BitNet's float (unpacked) weights are")
    return dict(hidden_act=_only_activation(arch, hf_config, "relu2"), o_proj_bias=bool(hf_config.attention_bias))


def _emu3(arch: str, hf_config) -> Dict[str, Any]:
    _only_activation(arch, hf_config, "silu")
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _aria_text(arch: str, hf_config) -> Dict[str, Any]:
    _only_activation(arch, hf_config, "silu")   # the shared experts' (the routed ones are always SiLU-gated)
    return dict(o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


def _cohere_compass(arch: str, hf_config) -> Dict[str, Any]:
    _only_activation(arch, hf_config, "silu")
    n, params = int(hf_config.num_hidden_layers), dict(hf_config.rope_parameters or {})
    kinds = list(hf_config.layer_types or ["full_attention"] * n)
    if len(kinds) != n or set(kinds) - {"full_attention", "sliding_attention"}:
        raise ValueError(f"{arch}: unsupported layer_types {kinds!r}")
    thetas = []
    for kind in kinds:
        rope = params.get(kind)
        if rope is not None and (rope.get("rope_type", "default") != "default"
                                 or float(rope.get("partial_rotary_factor", 1.0)) != 1.0):
            raise ValueError(f"{arch}: rope_parameters[{kind!r}] {rope!r} is not supported; only the default rope "
                             "over the whole head, or None")
        thetas.append(0.0 if rope is None else float(rope.get("rope_theta", 10000.0)))
    scale, bias = getattr(hf_config, "logit_scale", None), bool(getattr(hf_config, "attention_bias", False))
    return dict(rms_norm_eps=float(hf_config.layer_norm_eps), qk_norm=False, attention_bias=bias, o_proj_bias=bias,
                logit_scale=None if scale is None else float(scale), layer_rope_thetas=tuple(thetas),
                nope_layers=tuple(i for i, t in enumerate(thetas) if not t),
                rope_params={"rope_type": "default", "rope_theta": max(thetas) or 10000.0})


def _apertus1p5(arch: str, hf_config) -> Dict[str, Any]:
    pruned = getattr(hf_config, "output_vocab_size", None)
    if pruned and getattr(hf_config, "tie_word_embeddings", False):
        raise ValueError(f"{arch}: a pruned lm head (output_vocab_size) tied to the embeddings is not supported")
    return _apertus(arch, hf_config)


def pruned_vocabulary(arch: str, hf_config):
    """hf_config as ModelConfig.from_hf reads it: Apertus 1.5's vocabulary is its lm head's (output_vocab_size)."""
    pruned = getattr(hf_config, "output_vocab_size", None)
    return FieldsView(hf_config, {"vocab_size": int(pruned)}) if pruned else hf_config


NEWTEXT_FIELDS = {"Cohere2MoeForCausalLM": _cohere2_moe, "BitNetForCausalLM": _bitnet, "Emu3ForCausalLM": _emu3,
                  "AriaTextForCausalLM": _aria_text, "CohereCompassForCausalLM": _cohere_compass,
                  "Apertus1p5TextForCausalLM": _apertus1p5}
NEWTEXT_MODEL_TYPES = {"cohere2_moe": "Cohere2MoeForCausalLM", "bitnet": "BitNetForCausalLM",
                       "emu3_text_model": "Emu3ForCausalLM", "aria_text": "AriaTextForCausalLM",
                       "cohere_compass_text": "CohereCompassForCausalLM",
                       "apertus1p5_text": "Apertus1p5TextForCausalLM"}
