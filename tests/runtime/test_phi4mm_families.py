"""Phi-4-multimodal (HF Phi4MultimodalForCausalLM) served for text prompts (multimodal_wrappers.py: Phi-3's text
model, phi3.py, under the flat config; its image and audio embedders dropped) against HF transformers on the same tiny
random weights (tests/tiny_phi4mm_models.py, the whole multimodal model saved): prefills, a chunk beside a decode and
decodes, and greedy tokens through the real runner and scheduler.  test_each_difference_matters proves the oracle
notices LongRoPE, its attention factor, the partial rotary and the window each left out.
"""

import dataclasses
import json
import random
import shutil

import pytest
import torch
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_PHI4MM_ARCHS

from radixlm.runtime.models.loader import read_model_config

LENGTH = 26   # past the window (12), within the original context (32): LongRoPE's short factors


def _rope(changes: dict):
    """phi4mm's LongRoPE parameters with `changes` (ModelConfig fields)."""
    from tiny_phi4mm_models import phi4mm_config

    from radixlm.runtime.models.config import ModelConfig

    rope = ModelConfig.from_hf(phi4mm_config("phi4mm", 400, 2, 0)).rope_scaling
    return {"rope_scaling": {**rope, **changes}}


DIFFERENCES = [
    ("phi4mm", "LongRoPE's short factors", "fields", {"rope_scaling": None}),
    ("phi4mm", "LongRoPE's attention factor", "fields", _rope({"attention_factor": 1.0})),
    ("phi4mm_plain", "the partial rotary factor", "fields", {"rotary_dim": None}),
    ("phi4mm", "the sliding window", "fields", {"layer_windows": ()}),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", TINY_PHI4MM_ARCHS)
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """Two prefills in one step, a chunk beside a decode, then both rows decoding (one HF run: each row reads a prefix
    of its prompt)."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


def test_greedy_serving_matches_hf(tiny_model):
    """Through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    assert_greedy_serving_matches_hf(tiny_model("phi4mm"))


def test_config_read_as_phi3(tiny_model):
    """The flat config read as Phi-3's text model: tied, 8 rotated dims of 16, the window on every layer, LongRoPE
    from 32; the untied one with default rope on 12 of 16 dims."""
    config = read_model_config(tiny_model("phi4mm"))
    assert (config.architecture, config.language_model) == ("Phi4MultimodalForCausalLM", "Phi3ForCausalLM")
    assert config.tie_word_embeddings and config.rotary_dim == 8 and config.layer_windows == (12, 12, 12)
    assert config.rope_scaling["rope_type"] == "longrope"
    assert config.rope_scaling["original_max_position_embeddings"] == 32
    plain = read_model_config(tiny_model("phi4mm_plain"))
    assert not plain.tie_word_embeddings and plain.rotary_dim == 12 and plain.rope_scaling is None
    assert plain.rope_theta == 500.0 and not plain.layer_windows


def test_image_and_audio_token_ids_embedded_as_tokens(tiny_model):
    """A prompt with the image and audio token ids and no image or audio: HF embeds them as any token, so do we."""
    from logits_oracle import HF, Paged, assert_close

    path = tiny_model("phi4mm")
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    ids = random.Random(5).choices(range(vocab - 2), k=20)
    ids[3], ids[11], ids[17] = vocab - 1, vocab - 2, vocab - 1
    assert_close(Paged(path, reference=True).step([(0, ids)]), HF(path)(ids), "image and audio token ids")


def test_longrope_rows_match_hf(tiny_model):
    """Each position's cos/sin against HF's rotary embedding: short factors below 32 (HF: a sequence within the
    original context), long ones from 32 (HF: a sequence past it), both times the attention factor."""
    from transformers import AutoConfig
    from transformers.models.phi4_multimodal.modeling_phi4_multimodal import Phi4MultimodalRotaryEmbedding

    from radixlm.runtime.models.rope import rope_cos_sin_cache

    path = tiny_model("phi4mm")
    config = read_model_config(path)
    ours = rope_cos_sin_cache(config, 64)   # [64, rotated dims]
    rotary = Phi4MultimodalRotaryEmbedding(AutoConfig.from_pretrained(str(path)))
    x = torch.zeros(1, 1, config.head_dim)
    half = config.rotary_dim // 2
    for length in (32, 64):   # HF chooses the factors by the sequence's length
        cos, sin = rotary(x, torch.arange(length)[None])   # [1, L, rotated dims] each
        lo = 0 if length == 32 else 32
        assert torch.allclose(ours[lo:length, :half], cos[0, lo:, :half], atol=1e-6), length
        assert torch.allclose(ours[lo:length, half:], sin[0, lo:, :half], atol=1e-6), length
    same = dataclasses.replace(config, rope_scaling={**config.rope_scaling,
                                                     "long_factor": config.rope_scaling["short_factor"]})
    assert not torch.allclose(ours[31:33], rope_cos_sin_cache(same, 64)[31:33])   # the long factors move position 32


def test_lora_checkpoint_refused(tiny_model, tmp_path):
    """The remote code's checkpoint names (a LoRA adapter's base_layer and lora_A beside the projection): refused at
    load, as transformers' class would leave the projection unloaded."""
    from safetensors.torch import load_file, save_file

    from radixlm.runtime.models.loader import load_model

    folder = tmp_path / "peft"
    shutil.copytree(tiny_model("phi4mm"), folder)
    weights = load_file(folder / "model.safetensors")
    name = "model.layers.0.self_attn.qkv_proj.weight"
    weights[name.replace(".weight", ".base_layer.weight")] = weights.pop(name)
    weights[name.replace(".weight", ".lora_A.vision.weight")] = torch.zeros(4, 64)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="LoRA"):
        load_model(folder, torch.float32)
