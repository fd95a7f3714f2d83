"""Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b-it) served for text prompts: its language model read from
text_config and loaded from the multimodal weight names, the vision tower and projector skipped.

Oracle: HF's Gemma3ForConditionalGeneration (AutoModelForCausalLM) on the same tiny random weights, text ids only:
its float64 logits with the derived bound (logits_oracle.py) and its greedy generate.  The tiny text model is
tests/tiny_models.py's "gemma3" (windows of 6, layer_types, a local rope base); the vision tower is a one-layer SigLIP.
"""

import dataclasses
import logging

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model

from radixlm.runtime.models.loader import iter_safetensors, load_model, read_model_config

LENGTH = 24  # prompt tokens: past the window (6)


@pytest.fixture(scope="module")
def mm_path(tmp_path_factory):
    from transformers import Gemma3Config, SiglipVisionConfig

    tok = make_tiny_tokenizer()
    eos = tok.eos_token_id
    text = _hf_config("gemma3", len(tok), eos, tok.convert_tokens_to_ids("<|endoftext|>"))
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=16, patch_size=4)   # 4 x 4 patches pooled to mm_tokens_per_image 4
    config = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          eos_token_id=eos, tie_word_embeddings=True, architectures=["Gemma3ForConditionalGeneration"])
    return save_tiny_model(tmp_path_factory, config, "tiny-gemma3-mm", tok, seed=77)


@pytest.fixture(scope="module")
def case(mm_path):
    return family_case("gemma3_mm", mm_path, LENGTH, seed=13)


def test_config_is_the_text_models(mm_path, tiny_model):
    """Every number but the architecture is the text model's; transformers 5's save_pretrained writes the checkpoint
    names of the released models (language_model.model.*), not its in-memory ones (model.language_model.*)."""
    config = read_model_config(mm_path)
    assert config.architecture == "Gemma3ForConditionalGeneration"
    text = read_model_config(tiny_model("gemma3"))
    assert dataclasses.replace(config, architecture=text.architecture) == text
    assert config.tie_word_embeddings and config.layer_windows == (6, None, 6) and config.local_rope_theta == 100.0
    prefixes = {name.split(".")[0] + "." + name.split(".")[1] for name, _ in iter_safetensors(mm_path)}
    assert {p for p in prefixes if not p.startswith(("vision_tower.", "multi_modal_projector."))} == {
        "language_model.model"}


def test_prefill_extend_and_decode_match_hf(case):
    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill")
    paged.step([(1, ids[:15])])
    assert_close(paged.step([(1, ids[15:])]), ref[15:], "extend after a cached prefix of 15")
    paged.step([(2, ids[:4])])
    for i in range(4, LENGTH):
        assert_close(paged.step([(2, [ids[i]])]), ref[i:i + 1], f"decode at {i}")


def test_in_memory_names_load_the_same_weights(mm_path, tmp_path, caplog):
    """model.language_model.*, model.vision_tower.* and model.multi_modal_projector.* (transformers 5's module names,
    which a checkpoint may carry) load as the released names do, the vision weights skipped with one log line."""
    import shutil

    from safetensors.torch import save_file

    renamed = {}
    for name, tensor in iter_safetensors(mm_path):
        text = name.startswith("language_model.model.")
        renamed[name.replace("language_model.", "", 1).replace("model.", "model.language_model.", 1) if text
                else "model." + name] = tensor
    for f in mm_path.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, tmp_path / f.name)
    save_file(renamed, str(tmp_path / "model.safetensors"))
    with caplog.at_level(logging.INFO, logger="radixlm.runtime.models.gemma3"):
        model, _ = load_model(tmp_path)
    assert [r.getMessage() for r in caplog.records if "images are not served" in r.getMessage()] == [
        f"Gemma3ForConditionalGeneration: {sum(not k.startswith('model.language_model.') for k in renamed)} vision tower and "
        "projector weights skipped; images are not served, text prompts only"]
    released, _ = load_model(mm_path)
    assert list(model.state_dict()) == list(released.state_dict())
    for (name, a), (_, b) in zip(model.state_dict().items(), released.state_dict().items()):
        assert torch.equal(a, b), name


def test_greedy_matches_hf_generate(mm_path):
    """Through the real runner and scheduler, prefills in chunks of 8, the third request reusing the first's prompt
    (past the window) from the radix cache: HF's greedy tokens."""
    hf = assert_greedy_serving_matches_hf(mm_path)
    assert type(hf).__name__ == "Gemma3ForConditionalGeneration"
