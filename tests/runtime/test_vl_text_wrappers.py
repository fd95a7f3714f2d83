"""Vision-language checkpoints whose language model is a text model we serve (runtime/models/multimodal_wrappers.py),
served for text prompts.

Oracle: HF's conditional-generation model of each (AutoModelForImageTextToText) on the same tiny random weights,
vision tower included, called with token ids only as a text chat is: its float64 logits with the derived bound
(logits_oracle.py) and its greedy generate.  The tiny models are tiny_vl_text_models.py's.
"""

import json
import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close, family_case
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_vl_text_models import VL_TEXT, make_vl_text

from radixlm.runtime.models import multimodal_text
from radixlm.runtime.models.loader import iter_safetensors, load_model, read_model_config

LENGTH = 20  # prompt tokens: past the windows of Mistral (16), Cohere 2 and Exaone 4 (6)
DECODE_FROM = 15


@pytest.fixture(scope="module")
def vl_text(tmp_path_factory):
    """vl_text(name) -> its tiny folder, built once per module."""
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_vl_text(tmp_path_factory, name)
        return built[name]
    return folder


@pytest.mark.parametrize("name", VL_TEXT)
def test_prefill_extend_and_decode_match_hf(name, vl_text):
    assert_text_path_matches_hf(name, vl_text(name))


def assert_text_path_matches_hf(name, path, vision=True):
    """Our logits of the model at `path` are HF's whole model's on a text prompt: prefill, extend after a cached
    prefix, decode.  vision: whether the checkpoint has vision weights (which we drop)."""
    _, path, hf, ids = family_case(name, path, LENGTH, seed=17)
    arch = json.loads((path / "config.json").read_text())["architectures"][0]
    assert type(hf.fp64).__name__ == arch and read_model_config(path).architecture == arch
    assert any(multimodal_text.is_vision_weight(k) for k, _ in iter_safetensors(path)) == vision
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill")
    paged.step([(1, ids[:11])])
    assert_close(paged.step([(1, ids[11:])]), ref[11:], "extend after a cached prefix of 11")
    paged.step([(2, ids[:DECODE_FROM])])
    for i in range(DECODE_FROM, LENGTH):
        assert_close(paged.step([(2, [ids[i]])]), ref[i:i + 1], f"decode at {i}")


DIFFERENCES = [
    ("cohere2_vision", "the unscaled logits", "patch", (multimodal_text, "text_config_changes", lambda arch, text: {})),
    ("idefics2", "the top-level untie over text_config's tie", "fields", {"tie_word_embeddings": True}),
]


@pytest.mark.parametrize("name,left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(name, left_out, how, change, vl_text, tmp_path, monkeypatch):
    """Cohere2 Vision's lm head does not scale by Cohere 2's logit_scale; Idefics 2 keeps the lm head that its
    top-level tie_word_embeddings (False) keeps, though its Mistral text_config ties: doing as the text model does
    leaves the bound of HF's own float noise."""
    path = vl_text(name)
    config = json.loads((path / "config.json").read_text())
    text = config["text_config"]
    if name == "cohere2_vision":
        assert text["logit_scale"] != 1.0
    else:
        assert text["tie_word_embeddings"] is True and config["tie_word_embeddings"] is False
    ids = random.Random(21).choices(range(read_model_config(path).vocab_size), k=LENGTH)
    check_difference_left_out((path, ids, HF(path)(ids)), left_out, how, change, tmp_path, monkeypatch)


def _saved_as(path, tmp_path, tensors: dict):
    """`path` copied into tmp_path with `tensors` as its checkpoint -> (its model, path's model)."""
    from safetensors.torch import save_file

    for f in path.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, tmp_path / f.name)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return load_model(tmp_path)[0], load_model(path)[0]


def _assert_same_weights(model, reference):
    assert list(model.state_dict()) == list(reference.state_dict())
    for (key, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), key


def test_the_released_layers_load_the_same_weights(vl_text, tmp_path):
    """Qianfan-OCR's layers as released (language_model.model.layers.*) load as those transformers saves
    (language_model.model.encoder.layers.*)."""
    saved = dict(iter_safetensors(vl_text("qianfan_ocr")))
    released = {k.replace(".model.encoder.layers.", ".model.layers."): v for k, v in saved.items()}
    assert released.keys() != saved.keys()
    _assert_same_weights(*_saved_as(vl_text("qianfan_ocr"), tmp_path, released))


def test_glm_ocr_skips_its_multi_token_prediction_layer(vl_text, tmp_path):
    """GLM-OCR's released checkpoints carry a layer after the last (multi-token prediction): skipped, as HF does."""
    path = vl_text("glm_ocr")
    saved = dict(iter_safetensors(path))
    last = read_model_config(path).num_layers - 1
    mtp = {k.replace(f"layers.{last}.", f"layers.{last + 1}."): v.clone() for k, v in saved.items()
           if k.startswith(f"model.language_model.layers.{last}.")}
    assert mtp
    _assert_same_weights(*_saved_as(path, tmp_path, {**saved, **mtp}))


@pytest.mark.parametrize("name", ["idefics3", "lfm2_vl", "cohere2_vision", "nemotron_h_omni"])
def test_greedy_serving_matches_hf_generate(name, vl_text):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache; LFM2-VL's
    convolution state and Nemotron-H Omni's Mamba state from their snapshots), HF's greedy tokens."""
    path = vl_text(name)
    hf = assert_greedy_serving_matches_hf(path)
    assert type(hf).__name__ == json.loads((path / "config.json").read_text())["architectures"][0]


def test_a_glm4v_head_dim_other_than_hidden_over_heads_is_refused():
    """HF's GLM-4.1V attention takes hidden_size / heads whatever head_dim says, its rotary takes head_dim."""
    from transformers import Glm4vConfig

    from radixlm.runtime.models.config import ModelConfig

    text = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5,
                                 "mrope_section": [2, 3, 3]})
    config = Glm4vConfig(text_config=text, architectures=["Glm4vForConditionalGeneration"])
    with pytest.raises(ValueError, match="head_dim 32 other than hidden_size / num_attention_heads"):
        ModelConfig.from_hf(config)
