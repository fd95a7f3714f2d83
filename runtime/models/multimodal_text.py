"""Vision-language checkpoints served for text prompts: their language model, nothing of the vision side.

A multimodal config (MULTIMODAL_TEXT_ARCHITECTURES) nests its language model's config in text_config (Phi-4-multimodal's
is flat: multimodal_wrappers.language_config); text_config()
turns that into the config of a text architecture we serve (chosen by its model_type), with the top-level
eos_token_id and tie_word_embeddings where set, as HF's conditional-generation model stops and ties by those.
HF ties the lm head to the embeddings only where the checkpoint has no lm head of its own (untied_as_checkpoint).
The checkpoint's weights keep their multimodal names; language_model_weights() renames the language model's to the
text model's and drops the vision tower's and projector's (but Gemma 3n's embed_vision and embed_audio, which embed its
image and audio token ids for the language model: gemma3n.py).  language_model_class(text class) is the text model
loading such a checkpoint.

Qwen3-VL-MoE's checkpoints stack each layer's experts (experts.gate_up_proj [E, H, 2I], experts.down_proj [E, I, H]);
they are split into the per-expert weights of Qwen3-MoE (moe_model.py), whose routing is Qwen3-VL-MoE's with
norm_topk_prob.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL rotate by M-RoPE: the head's frequencies split into temporal, height and width
sections (mrope_section; interleaved in Qwen3-VL), each turned by its own position id.  For text, HF gives every
token the same position on all three axes, so the rotation is the plain 1-D rope of rope_theta; mrope_section is
only validated.  Images are refused at the API (content parts other than text: 400).  The chat template may be the
processor's only (processor_chat_template).

No torch here: config.py reads this.
"""

import copy
import dataclasses
import functools
import json
import logging
import struct
from pathlib import Path
from typing import Optional

from .ernie_vl_config import ERNIE_VL, ernie_vl_text_tensor, ernie_vl_text_view
from .gemma3n_config import with_hard_tokens
from .inkling_mm_names import INKLING_MM, inkling_tensors
from .molmo2_text import MOLMO2, molmo2_text_tensors
from .multimodal_wrappers import (
    WRAPPER_ARCHITECTURES,
    WRAPPER_LANGUAGE_MODEL_TYPES,
    WRAPPER_TEXT_PREFIXES,
    WRAPPER_VISION_PREFIXES,
    language_config,
    text_config_changes,
    text_model_name,
)
from .muse_config import MUSE_TEXT_MODEL_TYPES, muse_ties

logger = logging.getLogger(__name__)

MULTIMODAL_TEXT_ARCHITECTURES = (
    "Gemma3ForConditionalGeneration", "Mistral3ForConditionalGeneration", "LlavaForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Llama4ForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "Gemma4ForConditionalGeneration",
    "Gemma3nForConditionalGeneration",
)
# text_config model types that only multimodal checkpoints have -> the text architecture that runs them
_LANGUAGE_MODEL_TYPES = {"qwen2_vl_text": "Qwen2ForCausalLM", "qwen2_5_vl_text": "Qwen2ForCausalLM",
                         "qwen3_vl_text": "Qwen3ForCausalLM", "qwen3_vl_moe_text": "Qwen3MoeForCausalLM",
                         **WRAPPER_LANGUAGE_MODEL_TYPES}
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")
MULTIMODAL_TEXT_ARCHITECTURES += WRAPPER_ARCHITECTURES   # multimodal_wrappers.py's

# transformers 5's module names, then the released checkpoints' (Gemma 3, Mistral 3, LLaVA); Qwen2-VL's and
# Qwen2.5-VL's released names (model.layers.*, lm_head.*) are the text model's already
_TEXT_PREFIXES = WRAPPER_TEXT_PREFIXES + (("model.language_model.", "model."), ("language_model.model.", "model."),
                  ("language_model.lm_head.", "lm_head."))
_VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.", "model.visual.",
                    "vision_tower.", "multi_modal_projector.", "visual.", "vision_model.",
                    "model.embed_vision.", "model.audio_tower.", "model.embed_audio.")   # Gemma 4's, audio too
_VISION_PREFIXES += WRAPPER_VISION_PREFIXES


def text_config(hf_config, model_type_architectures: dict):
    """hf_config's text_config, its `architectures` set to the text architecture that serves it (by its model_type,
    through `model_type_architectures` for the model types text checkpoints have too), M-RoPE reduced to plain
    rope; ValueError for a language model we do not serve or an mrope_section that does not fit the head."""
    arch = hf_config.architectures[0]
    text = copy.deepcopy(language_config(arch, hf_config))
    text_arch = _LANGUAGE_MODEL_TYPES.get(text.model_type) or model_type_architectures.get(text.model_type)
    if text_arch is None:
        raise ValueError(f"{arch}: its language model (text_config model_type {text.model_type!r}) is not one we "
                         "serve")
    text.architectures = [text_arch]
    for key in ("eos_token_id", "tie_word_embeddings"):
        if getattr(hf_config, key, None) is not None:
            setattr(text, key, getattr(hf_config, key))
    for key, value in text_config_changes(arch, text).items():
        setattr(text, key, value)
    _drop_mrope(arch, text)
    if text.model_type == "qwen3_vl_moe_text":   # its router always renormalises the top k
        text.norm_topk_prob = True
    if text.model_type == "gemma3n_text":   # ids past the text vocabulary's own: embedded by the multimodal embedders
        with_hard_tokens(text, hf_config)
    if text.model_type in MUSE_TEXT_MODEL_TYPES:   # HF embeds its placeholders as id 0, ties by the top-level flag only
        ids = (getattr(hf_config, f"{kind}_token_id", None) for kind in ("image", "video", "audio"))
        text.placeholders_as_pad = (0, *(int(i) for i in ids if i is not None))
        text.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False)) and muse_ties(text)
    if text.model_type in ("gemma4_text", "gemma4_unified_text") and text.pad_token_id is not None:   # HF embeds
        # its placeholders as the pad
        ids = (getattr(hf_config, f"{kind}_token_id", None) for kind in ("image", "video", "audio"))
        text.placeholders_as_pad = (int(text.pad_token_id), *(int(i) for i in ids if i is not None))
    return ernie_vl_text_view(arch, text) if text.model_type == "ernie4_5_vl_moe_text" else text


def _drop_mrope(arch: str, text) -> None:
    for field in ("rope_parameters", "rope_scaling"):
        params = getattr(text, field, None)
        if not isinstance(params, dict) or "mrope_section" not in params:
            continue
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        rotated = int(head_dim * float(params.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)
                                                  or 1.0)))
        section = [int(s) for s in params["mrope_section"]]
        if sum(section) != rotated // 2:
            raise ValueError(f"{arch}: mrope_section {section} must sum to the rotated dims / 2 = {rotated // 2}")
        params = {k: v for k, v in params.items() if k not in _MROPE_KEYS}
        if params.get("rope_type", params.get("type")) == "mrope":   # v4 configs' name for it
            params.pop("type", None)
            params["rope_type"] = "default"
        setattr(text, field, params)


def language_model_weights(named_tensors, config):
    """(name, tensor) of a multimodal checkpoint -> its language model's, under the text model's names (ModelConfig
    `config`); the vision tower's and projector's are dropped, with one log line when there were any."""
    if isinstance(named_tensors, _LanguageModelStream):   # renamed already (a text model reading its own stream)
        return named_tensors
    return _LanguageModelStream(_language_model_weights(named_tensors, config))


class _LanguageModelStream:
    """language_model_weights' stream, which it passes on as it is."""

    def __init__(self, named_tensors):
        self.named_tensors = named_tensors

    def __iter__(self):
        return iter(self.named_tensors)


def _language_model_weights(named_tensors, config):
    skipped, kept = 0, tuple(f"model.{e.name}." for e in config.gemma3n.hard_tokens) if config.gemma3n else ()
    tables = {}   # Molmo2's embedding tables, until both are read
    for name, tensor in named_tensors:
        if is_vision_weight(name) and not name.startswith(kept):
            skipped += 1
            continue
        old = next((old for old in _TEXT_PREFIXES if name.startswith(old[0])), None)
        name = text_model_name(old[1] + name[len(old[0]):] if old else name, config)
        if name is not None:
            if config.architecture == ERNIE_VL:
                tensor = ernie_vl_text_tensor(name, tensor)
            if config.architecture == MOLMO2:
                yield from molmo2_text_tensors(name, tensor, config, tables)
                continue
            if config.architecture == INKLING_MM:
                yield from inkling_tensors(name, tensor)
                continue
            yield from split_stacked_experts(name, tensor, config)
    if skipped:
        logger.info("%s: %d vision tower and projector weights skipped; images are not served, text prompts only",
                    config.architecture, skipped)


def split_stacked_experts(name: str, tensor, config):
    """Qwen3-VL-MoE's stacked experts -> Qwen3-MoE's experts.{e}.{gate,up,down}_proj.weight; other names as they are.
    As transformers does, a stack in its module's layout ([E, 2I, H] and [E, H, I]: H where the module has it) is
    taken as it is, the released one ([E, H, 2I] and [E, I, H]) transposed."""
    prefix, _, kind = name.rpartition("mlp.experts.")
    if kind not in ("gate_up_proj", "down_proj") or config.moe is None:
        yield name, tensor
        return
    if tensor.shape[2 if kind == "gate_up_proj" else 1] != config.hidden_size:
        tensor = tensor.transpose(1, 2)
    for e, w in enumerate(tensor):   # w: [2I, H] or [H, I]
        if kind == "down_proj":
            yield f"{prefix}mlp.experts.{e}.down_proj.weight", w
        else:
            yield f"{prefix}mlp.experts.{e}.gate_proj.weight", w[:w.shape[0] // 2]
            yield f"{prefix}mlp.experts.{e}.up_proj.weight", w[w.shape[0] // 2:]


class _LanguageModelWeights:
    """Mixin: the text model reading a multimodal checkpoint (load_weights and the sharder's checkpoint_tensors)."""

    loads_fp8_checkpoints = False   # their ignored-layer names are the multimodal ones: unverified, so refused

    def checkpoint_tensors(self, named_tensors):
        text_model_tensors = getattr(super(), "checkpoint_tensors", lambda named: named)
        return text_model_tensors(language_model_weights(named_tensors, self.config))

    def load_weights(self, named_tensors) -> None:
        super().load_weights(language_model_weights(named_tensors, self.config))


@functools.cache
def language_model_class(text_cls: type) -> type:
    """`text_cls` loading a multimodal checkpoint's language model."""
    return type(f"{text_cls.__name__}OfMultimodal", (_LanguageModelWeights, text_cls), {})


def is_vision_weight(name: str) -> bool:
    """Whether a checkpoint tensor is a vision tower's or projector's (which we do not load)."""
    return name.startswith(_VISION_PREFIXES)


def processor_chat_template(folder) -> Optional[str]:
    """The template of the folder's chat_template.json (a processor's, where older vision-language checkpoints keep
    it instead of in tokenizer_config.json), else None."""
    file = Path(folder) / "chat_template.json"
    template = json.loads(file.read_text()).get("chat_template") if file.is_file() else None
    return template if isinstance(template, str) else None


def untied_as_checkpoint(config, folder):
    """`config` untied where the folder's checkpoint has an lm head of its own: transformers 5 then keeps it (a
    tied model's lm head is not in its checkpoint).  Mistral3Config's top-level tie_word_embeddings defaults to True,
    so a released Mistral Small config that leaves it unset would otherwise tie over an untied checkpoint."""
    if config.language_model is None or not config.tie_word_embeddings:
        return config
    if _checkpoint_names(Path(folder)) & {"lm_head.weight", "language_model.lm_head.weight"}:
        return dataclasses.replace(config, tie_word_embeddings=False)
    return config


def _checkpoint_names(folder: Path) -> set:
    """The tensor names of the folder's *.safetensors (index json or file headers); empty without weights."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    names = set()
    for file in folder.glob("*.safetensors"):
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            names.update(json.loads(f.read(size)))
    return names - {"__metadata__"}
