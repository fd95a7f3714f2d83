"""More vision-language checkpoints served for text prompts (runtime/models/multimodal_wrappers.py) and Llama 3.2
Vision's text model (runtime/models/mllama.py).

Oracle: HF's conditional-generation model of each (AutoModelForImageTextToText; MllamaForCausalLM for the text model
alone) on the same tiny random weights, vision side included, called with token ids only as a text chat is: its
float64 logits with the derived bound (logits_oracle.py) and its greedy generate.  The tiny models are
tiny_vl2_models.py's.
"""

import json
import random

import pytest
from logits_oracle import HF, Paged, assert_close
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import _assert_same_weights, _saved_as, assert_text_path_matches_hf
from tiny_vl2_models import VL2, image_text_to_text, make_vl2

from radixlm.runtime.models import config as model_config
from radixlm.runtime.models import multimodal_text
from radixlm.runtime.models.ernie_vl_config import ernie_vl_text_tensor
from radixlm.runtime.models.gemma4 import Gemma4ForCausalLM
from radixlm.runtime.models.loader import iter_safetensors, read_model_config

LENGTH = 20  # prompt tokens: past Gemma 4 Unified's window (8)


@pytest.fixture(scope="module")
def vl2(tmp_path_factory):
    """vl2(name) -> its tiny folder, built once per module."""
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_vl2(tmp_path_factory, name)
        return built[name]
    return folder


@pytest.mark.parametrize("name", VL2)
def test_prefill_extend_and_decode_match_hf(name, vl2):
    vision = name != "mllama_text"   # Llama 3.2 Vision's text model alone has none
    with image_text_to_text(name):
        assert_text_path_matches_hf(name, vl2(name), vision)


def test_mllama_runs_its_self_attention_layers_alone(vl2):
    """The text path skips the cross-attention layer (the second of four): three layers hold KV, the checkpoint's
    embedding keeps 8 rows past the vocabulary."""
    path = vl2("mllama")
    config = read_model_config(path)
    assert config.num_layers == config.kv_layers == 3 and config.self_attention_layers == (0, 2, 3)
    weights = dict(iter_safetensors(path))
    assert weights["language_model.model.embed_tokens.weight"].shape[0] == config.vocab_size + 8
    assert any(".layers.1.cross_attn." in k for k in weights)


def _with_placeholders(path):
    """A prompt of `path`'s vocabulary holding Gemma 4 Unified's image, video and audio placeholders."""
    ids = random.Random(21).choices(range(read_model_config(path).vocab_size - 3), k=LENGTH)
    config = json.loads((path / "config.json").read_text())
    ids[3], ids[9], ids[14] = config["image_token_id"], config["video_token_id"], config["audio_token_id"]
    return ids


def test_gemma4_unified_embeds_its_placeholders_as_the_pad(vl2):
    """HF's text path embeds the image, video and audio placeholder ids as the pad token: so do we."""
    path = vl2("gemma4_unified")
    ids = _with_placeholders(path)
    assert_close(Paged(path).step([(0, ids)]), HF(path)(ids), "prefill with placeholders")


def _vision_experts_bias(name, tensor):
    """ERNIE 4.5 VL's correction bias row of the vision experts in place of the text experts'."""
    return tensor[1:] if name.endswith("e_score_correction_bias") else ernie_vl_text_tensor(name, tensor)


DIFFERENCES = [
    ("mllama_text", "the untied lm head of a config that ties", "patch",
     (model_config, "ties_lm_head", lambda arch, c: bool(c.tie_word_embeddings))),
    ("ernie4_5_vl_moe", "the text experts' correction bias", "patch",
     (multimodal_text, "ernie_vl_text_tensor", _vision_experts_bias)),
    ("gemma4_unified", "the placeholders embedded as the pad", "patch",
     (Gemma4ForCausalLM, "text_ids", lambda self, input_ids: input_ids)),
]


@pytest.mark.parametrize("name,left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(name, left_out, how, change, vl2, tmp_path, monkeypatch):
    """MllamaForCausalLM never ties its lm head to the embeddings (HF's has no tied weights), whatever its config's
    tie_word_embeddings says; ERNIE 4.5 VL routes text tokens by the text experts' correction bias (the first row);
    Gemma 4 Unified embeds its placeholders as the pad: doing otherwise leaves the bound of HF's own float noise."""
    path = vl2(name)
    if name == "mllama_text":
        assert json.loads((path / "config.json").read_text())["tie_word_embeddings"] is True
    ids = random.Random(21).choices(range(read_model_config(path).vocab_size), k=LENGTH)
    if name == "gemma4_unified":
        ids = _with_placeholders(path)
    check_difference_left_out((path, ids, HF(path)(ids)), left_out, how, change, tmp_path, monkeypatch)


MODULE_NAMES = {   # released (and saved) prefix -> transformers 5's module name
    "mllama": (("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."),
               ("vision_model.", "model.vision_model."), ("multi_modal_projector.", "model.multi_modal_projector.")),
    "emu3": (("text_model.model.", "model.text_model."), ("text_model.lm_head.", "lm_head."),
             ("vqmodel.", "model.vqmodel.")),
    "dots3_note": (("model.", "model.language_model."), ("lm_head.", "lm_head."),   # the head named as saved
                   ("vision_encoder.", "model.vision_tower."), ("audio_encoder.", "model.audio_tower.")),
}


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_module_names_load_the_same_weights(name, vl2, tmp_path):
    """Llama 3.2 Vision, Emu3 and Dots 3 Note under transformers 5's module names (model.language_model.*, lm_head.* ...) load
    as they are released and saved (language_model.model.*, language_model.lm_head.* ...)."""
    saved = dict(iter_safetensors(vl2(name)))
    modules = {}
    for k, v in saved.items():
        old, new = next((old, new) for old, new in MODULE_NAMES[name] if k.startswith(old))
        modules[new + k[len(old):]] = v
    assert modules.keys() != saved.keys()
    _assert_same_weights(*_saved_as(vl2(name), tmp_path, modules))


@pytest.mark.parametrize("name", ["mllama", "gemma4_unified", "ernie4_5_vl_moe", "qwen4_exp"])
def test_greedy_serving_matches_hf_generate(name, vl2):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache; Qwen4-Exp's
    delta-net state from its snapshot), HF's greedy tokens."""
    path = vl2(name)
    hf = assert_greedy_serving_matches_hf(path)
    assert type(hf).__name__ == json.loads((path / "config.json").read_text())["architectures"][0]


@pytest.mark.parametrize("name,change,message", [
    ("mllama", dict(head_dim=32), "head_dim 32 other than hidden_size / num_attention_heads"),
    ("mllama", dict(cross_attention_layers=[4]), r"cross_attention_layers \[4\] must be layers of the 4"),
    ("ernie4_5_vl_moe", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2]}),
     r"\[h, h, t\]"),
    ("ernie4_5_vl_moe", dict(mlp_layer_types=["sparse", "sparse", "dense", "sparse"]), "not every k-th layer of a range"),
])
def test_configs_we_do_not_run_are_refused(name, change, message):
    """Mllama: a head_dim HF's attention ignores, cross-attention layers past the last; ERNIE 4.5 VL: M-RoPE sections
    whose height and width differ (HF's text rope then is not ERNIE's), sparse layers ERNIE 4.5 MoE cannot lay out."""
    from tiny_vl2_models import vl2_config

    from radixlm.runtime.models.config import ModelConfig

    config = vl2_config(name, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
