"""Vision-language checkpoints of group VL3 served for text prompts (runtime/models/multimodal_wrappers.py):
Inkling, Inkling 2, Inkling 2 Loop and Hy V4 VL.

Oracle: HF's conditional-generation model of each (AutoModelForImageTextToText) on the same tiny random weights,
vision (and audio) side included, called with token ids only as a text chat is: its float64 logits with the derived
bound (logits_oracle.py) and its greedy generate.  The tiny models are tiny_vl3_models.py's.
"""

import json
import random

import pytest
from logits_oracle import HF
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import LENGTH, _assert_same_weights, _saved_as, assert_text_path_matches_hf
from tiny_vl3_models import VL3, make_vl3

from radixlm.runtime.models import inkling_mm_names, multimodal_text
from radixlm.runtime.models.loader import iter_safetensors, read_model_config


@pytest.fixture(scope="module")
def vl3(tmp_path_factory):
    """vl3(name) -> its tiny folder, built once per module."""
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_vl3(tmp_path_factory, name)
        return built[name]
    return folder


@pytest.mark.parametrize("name", VL3)
def test_prefill_extend_and_decode_match_hf(name, vl3):
    assert_text_path_matches_hf(name, vl3(name))


def _interleaved_rows_kept(name, tensor):
    """inkling_tensors over the released fused gate and up rows as they are stored (not taken apart)."""
    for suffix, (dim, _) in inkling_mm_names._FUSED.items():
        if name.endswith(suffix):   # interleaved again, so that inkling_tensors' de-interleave gives the stored rows
            shape = tensor.shape
            tensor = tensor.reshape(*shape[:dim], 2, shape[dim] // 2, *shape[dim + 1:]).transpose(dim, dim + 1)
            tensor = tensor.reshape(shape)
    return inkling_mm_names.inkling_tensors(name, tensor)


DIFFERENCES = [
    ("hy_v4_vl", "the latent norms' eps of rms_norm_eps", "patch",
     (multimodal_text, "text_config_changes", lambda arch, text: {})),
    ("inkling_mm_model", "the released gate and up rows taken apart", "patch",
     (multimodal_text, "inkling_tensors", _interleaved_rows_kept)),
]


@pytest.mark.parametrize("name,left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(name, left_out, how, change, vl3, tmp_path, monkeypatch):
    """Hy V4 VL's q_a and kv_a norms take rms_norm_eps (0.1 here), Hy V4's RMSNorm's default 1e-6; Inkling's released
    checkpoints interleave the gate and up rows of its fused projections: doing otherwise leaves the bound of HF's
    own float noise."""
    path = vl3(name)
    if name == "hy_v4_vl":
        assert json.loads((path / "config.json").read_text())["text_config"]["rms_norm_eps"] == 0.1
    ids = random.Random(21).choices(range(read_model_config(path).vocab_size), k=LENGTH)
    check_difference_left_out((path, ids, HF(path)(ids)), left_out, how, change, tmp_path, monkeypatch)


def test_inkling_module_names_load_the_same_weights(vl3, tmp_path):
    """Inkling under transformers 5's module names (model.language_model.*, lm_head.*, the towers' model.vision_tower.*
    and model.audio_tower.*: what HF's load makes of the released model.llm.*, model.visual.*, model.audio.*) loads
    as released."""
    path = vl3("inkling_mm_model")
    released = dict(iter_safetensors(path))
    assert any(k.startswith("model.llm.") for k in released) and any(".w13_dn." in k for k in released)
    modules = {k: v.contiguous() for k, v in HF(path).fp32.state_dict().items()}
    assert not any(k.startswith("model.llm.") for k in modules)
    _assert_same_weights(*_saved_as(path, tmp_path, modules))


@pytest.mark.parametrize("name", ["inkling_mm_model", "hy_v4_vl"])
def test_greedy_serving_matches_hf_generate(name, vl3):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens."""
    path = vl3(name)
    hf = assert_greedy_serving_matches_hf(path)
    assert type(hf).__name__ == json.loads((path / "config.json").read_text())["architectures"][0]


@pytest.mark.parametrize("name,change,message", [
    ("hy_v4_vl", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 2, 1]}),
     r"mrope_section \[2, 2, 1\] must sum to the rotated dims / 2 = 4"),
    ("hy_v4_vl", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4,
                                       "mrope_section": [2, 1, 1]}), "only the default rope"),
])
def test_configs_we_do_not_run_are_refused(name, change, message):
    """Hy V4 VL: M-RoPE sections that do not fit the rotated dims, a rope other than the default (Hy V4's)."""
    from tiny_vl3_models import vl3_config

    from radixlm.runtime.models.config import ModelConfig

    config = vl3_config(name, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
