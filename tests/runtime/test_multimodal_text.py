"""Vision-language checkpoints served for text prompts (runtime/models/multimodal_text.py): Gemma 3, Mistral 3 (over
Mistral and over Ministral 3), LLaVA (over Qwen2), Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE.

Oracle: HF's conditional-generation model of each (AutoModelForImageTextToText) on the same tiny random weights,
called with token ids only as a text chat is: its float64 logits with the derived bound (logits_oracle.py) and its
greedy generate.  Its M-RoPE position ids are then the same on all three axes, which our plain rope must match.
The tiny models are multimodal_models.py's; each language model has its own differences binding.
"""

import dataclasses
import json
import logging
import shutil

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from multimodal_models import MULTIMODAL, make_multimodal
from scheduler_harness import assert_greedy_serving_matches_hf

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import iter_safetensors, load_model, load_tokenizer, read_model_config

LENGTH = 24  # prompt tokens: past the windows of Gemma 3 (6) and Mistral (16)
DECODE_FROM = 14  # decode steps from here to LENGTH: into Mistral's window and past it
TEXT_MODELS = {"gemma3_mm": "gemma3", "mistral3": "mistral"}   # tiny_models' text model under each


@pytest.fixture(scope="module")
def multimodal(tmp_path_factory):
    """multimodal(name) -> its tiny folder, built once per module."""
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_multimodal(tmp_path_factory, name)
        return built[name]
    return folder


@pytest.fixture(scope="module", params=MULTIMODAL)
def mm_path(request, multimodal):
    return multimodal(request.param)


def test_prefill_extend_and_decode_match_hf(mm_path):
    _, path, hf, ids = family_case(mm_path.name, mm_path, LENGTH, seed=13)
    assert type(hf.fp64).__name__ == json.loads((path / "config.json").read_text())["architectures"][0]
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill")
    paged.step([(1, ids[:15])])
    assert_close(paged.step([(1, ids[15:])]), ref[15:], "extend after a cached prefix of 15")
    paged.step([(2, ids[:DECODE_FROM])])
    for i in range(DECODE_FROM, LENGTH):
        assert_close(paged.step([(2, [ids[i]])]), ref[i:i + 1], f"decode at {i}")


@pytest.mark.parametrize("name", ["gemma3_mm", "mistral3"])
def test_config_is_the_text_models(name, multimodal, tiny_model):
    """Every number but the architecture is the text model's (tiny Mistral 3 unties tiny_models' tied Mistral)."""
    path = multimodal(name)
    config = read_model_config(path)
    text = read_model_config(tiny_model(TEXT_MODELS[name]))
    assert config.architecture == json.loads((path / "config.json").read_text())["architectures"][0]
    if name == "mistral3":
        text = dataclasses.replace(text, tie_word_embeddings=False)
    assert dataclasses.replace(config, architecture=text.architecture, language_model=None) == text
    assert config.language_model == text.architecture


def test_ministral3_context_runs_to_max_position_embeddings(multimodal):
    """HF scales Ministral 3's queries from original_max_position_embeddings (64 here) on, and so do we (query_scale:
    test_ministral3_scaling.py): the context is max_position_embeddings; YaRN's frequencies (factor 16) are ours."""
    path = multimodal("ministral3_mm")
    config = read_model_config(path)
    assert (config.language_model, config.max_position_embeddings, config.context_length) == (
        "Ministral3ForCausalLM", 1024, 1024)
    assert config.query_scale == (0.1, 64)
    assert config.rope_scaling["rope_type"] == "yarn" and config.rope_scaling["factor"] == 16.0


def _module_names(name: str, tensor):
    """A released checkpoint's name -> transformers 5's module name (model.language_model.*, model.visual.* ...)."""
    for old, new in (("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."),
                     ("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector."),
                     ("visual.", "model.visual."), ("model.", "model.language_model.")):
        if name.startswith(old):
            return new + name[len(old):], tensor
    return name, tensor


def _released_experts(name: str, tensor):
    """Qwen3-VL-MoE's experts as transformers 5 saves them ([E, 2I, H], [E, H, I]) -> as released ([E, H, 2I] ...)."""
    return name, (tensor.transpose(1, 2).contiguous() if name.endswith(("experts.gate_up_proj", "experts.down_proj"))
                  else tensor)


@pytest.mark.parametrize("name, other_layout", [("mistral3", _module_names), ("qwen2_vl", _module_names),
                                                ("qwen3_vl_moe", _released_experts)])
def test_the_other_layout_loads_the_same_weights(name, other_layout, multimodal, tmp_path, caplog):
    """The names and layouts transformers 5's save_pretrained does not write load as those it does: its module names
    (model.language_model.*, model.vision_tower.*, model.visual.*, lm_head.*) in place of the released ones
    (language_model.model.*, Qwen2-VL's model.layers.* and visual.*), and Qwen3-VL-MoE's experts stacked as released;
    the vision weights skipped with one log line."""
    from safetensors.torch import save_file

    path = multimodal(name)
    saved = dict(iter_safetensors(path))
    other = dict(other_layout(k, v) for k, v in saved.items())
    assert any(k not in saved or not torch.equal(v, saved[k]) for k, v in other.items())
    for f in path.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, tmp_path / f.name)
    save_file(other, str(tmp_path / "model.safetensors"))
    with caplog.at_level(logging.INFO, logger="radixlm.runtime.models.multimodal_text"):
        model, config = load_model(tmp_path)
    vision = sum(k.startswith(("model.visual.", "model.vision_tower.", "model.multi_modal_projector.", "visual.",
                               "vision_tower.", "multi_modal_projector.")) for k in other)
    assert vision > 0 and [r.getMessage() for r in caplog.records if "images" in r.getMessage()] == [
        f"{config.architecture}: {vision} vision tower and projector weights skipped; images are not served, "
        "text prompts only"]
    reference, _ = load_model(path)
    assert list(model.state_dict()) == list(reference.state_dict())
    for (key, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), key


def test_greedy_serving_matches_hf_generate(multimodal):
    """Qwen3-VL through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache)."""
    path = multimodal("qwen3_vl")
    hf = assert_greedy_serving_matches_hf(path)
    assert type(hf).__name__ == "Qwen3VLForConditionalGeneration"


def test_bad_mrope_sections_and_unserved_language_models_are_refused():
    from transformers import LlavaConfig, Qwen2VLConfig

    text = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 4]})
    config = Qwen2VLConfig(text_config=text, architectures=["Qwen2VLForConditionalGeneration"])
    with pytest.raises(ValueError, match=r"mrope_section \[2, 3, 4\] must sum to the rotated dims / 2 = 8"):
        ModelConfig.from_hf(config)
    llava = LlavaConfig(text_config={"model_type": "t5"}, architectures=["LlavaForConditionalGeneration"])
    with pytest.raises(ValueError, match="language model.*'t5'.*not one we serve"):
        ModelConfig.from_hf(llava)


def test_fp8_checkpoints_are_refused(multimodal, tmp_path):
    """A multimodal FP8 checkpoint (Ministral 3's releases) names its unquantized layers by the multimodal names,
    which the FP8 loader does not map: refused at load, pointing at --quantization fp8 instead."""
    path = multimodal("ministral3_mm")
    shutil.copytree(path, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "static",
                                     "modules_to_not_convert": ["model.vision_tower", "lm_head"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="FP8 checkpoints load only.*--quantization fp8"):
        load_model(tmp_path)


def test_image_content_parts_get_a_400(multimodal):
    """A chat message carrying an image is refused with a 400 naming the part, as for every text model."""
    from radixlm.runtime.api.errors import APIError
    from radixlm.runtime.openai.protocol import ChatMessage
    from radixlm.runtime.openai.tool_calls.prompt import template_messages

    path = multimodal("qwen2_vl")
    assert load_tokenizer(path).chat_template
    msg = ChatMessage(role="user", content=[{"type": "text", "text": "what is this?"},
                                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,x"}}])
    with pytest.raises(APIError) as err:
        template_messages([msg], None, [], None, None)
    assert err.value.status == 400 and "image_url" in err.value.message


def test_processor_chat_template_and_device_sizes(multimodal, tmp_path):
    """A folder laid out as older releases are (the chat template only in the processor's chat_template.json) gets
    that template; the CUDA defaults' sizes (device_defaults.model_sizes) are the language model's: its KV per token
    and its weights, the vision tower's left out."""
    from radixlm.runtime.server import device_defaults as dd

    path = multimodal("qwen2_vl")
    shutil.copytree(path, tmp_path, dirs_exist_ok=True)
    tok_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    template = tok_config.pop("chat_template", None) or (tmp_path / "chat_template.jinja").read_text()
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tok_config))
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    assert load_tokenizer(tmp_path).chat_template == template

    model, config = load_model(tmp_path)
    weights, per_token = dd.model_sizes(str(tmp_path), "bfloat16", "cuda")
    assert per_token == 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2
    assert weights == 2 * sum(p.numel() for p in model.parameters())


def test_an_unset_top_level_tie_over_an_untied_checkpoint_stays_untied(multimodal, tmp_path):
    """A Mistral 3 config.json without a top-level tie_word_embeddings (Mistral3Config's default: True) over a checkpoint
    with its own lm head: transformers keeps that lm head, and so do we (the logits would differ otherwise)."""
    from transformers import AutoConfig

    path = multimodal("mistral3")
    shutil.copytree(path, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["tie_word_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert AutoConfig.from_pretrained(str(tmp_path)).tie_word_embeddings
    assert not read_model_config(tmp_path).tie_word_embeddings
    _, _, hf, ids = family_case("mistral3", tmp_path, 8, seed=5)
    assert_close(Paged(tmp_path).step([(0, ids)]), hf(ids), "prefill")
