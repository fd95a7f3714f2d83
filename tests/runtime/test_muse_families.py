"""Muse Glimmer and Muse Spark served for text prompts (runtime/models/muse.py, muse_spark.py, muse_config.py).

Oracle: HF's MuseGlimmerForConditionalGeneration and MuseSparkForConditionalGeneration on the same tiny random
weights, vision (and audio) towers included, called with token ids only as a text chat is (their image, video and
audio ids among them, which HF embeds as id 0): float64 logits with the derived bound (logits_oracle.py) and greedy
generate.  The tiny models are tiny_muse_models.py's.
"""

import dataclasses
import random

import pytest
from logits_oracle import HF, Paged, assert_close
from muse_variants import GLIMMER_DIFFERENCES, SPARK_DIFFERENCES
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_muse_models import AUDIO_ID, IMAGE_ID, MUSE, VIDEO_ID, make_muse, muse_config

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.multimodal_text import is_vision_weight

LENGTH, DECODE_FROM = 20, 15
GLIMMER = ("MuseGlimmerForConditionalGeneration", "MuseGlimmerTextForCausalLM")
ARCHS = {"muse_glimmer": GLIMMER, "muse_glimmer_tied": GLIMMER,
         "muse_spark": ("MuseSparkForConditionalGeneration", "MuseSparkTextForCausalLM")}


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """case(name) -> (path, ids, HF's logits of the ids): the ids random, with the image id at 3 and 17, the video id
    at 9, the audio id at 12."""
    built = {}

    def build(name):
        if name not in built:
            path = make_muse(tmp_path_factory, name)
            ids = random.Random(17).choices(range(read_model_config(path).vocab_size), k=LENGTH)
            ids[3] = ids[17] = IMAGE_ID
            ids[9], ids[12] = VIDEO_ID, AUDIO_ID
            built[name] = (path, ids, HF(path)(ids))
        return built[name]
    return build


@pytest.mark.parametrize("name", MUSE)
def test_prefill_extend_and_decode_match_hf(name, case):
    """Prefill, extend after a cached prefix, decode (an image id among the decoded tokens): HF's whole model's
    logits; past the window of 6 on the sliding layers.  The lm head is tied by the top-level flag only (Glimmer's;
    Spark's never), though every text_config ties: a tied checkpoint has no lm head of its own."""
    path, ids, ref = case(name)
    config = read_model_config(path)
    assert (config.architecture, config.language_model) == ARCHS[name]
    assert (config.layer_windows, config.nope_layers) == ((6, None, 6), (2,))
    assert config.placeholders_as_pad == (0, IMAGE_ID, VIDEO_ID) + ((AUDIO_ID,) if name == "muse_spark" else ())
    assert config.tie_word_embeddings == (name == "muse_glimmer_tied")
    assert any(k == "lm_head.weight" for k, _ in iter_safetensors(path)) != config.tie_word_embeddings
    assert any(is_vision_weight(k) for k, _ in iter_safetensors(path))
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill")
    paged.step([(1, ids[:11])])
    assert_close(paged.step([(1, ids[11:])]), ref[11:], "extend after a cached prefix of 11")
    paged.step([(2, ids[:DECODE_FROM])])
    for i in range(DECODE_FROM, LENGTH):
        assert_close(paged.step([(2, [ids[i]])]), ref[i:i + 1], f"decode at {i}")


DIFFERENCES = [("muse_glimmer", *d) for d in GLIMMER_DIFFERENCES] + [("muse_spark", *d) for d in SPARK_DIFFERENCES]


@pytest.mark.parametrize("name,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(name, left_out, how, change, case, tmp_path, monkeypatch):
    """Each difference from the neighbours (muse_variants.py), left out in turn, leaves the bound of HF's own float
    noise."""
    if how == "layout":   # a MuseLayout field (or its Spark part's) changed
        layout, change = read_model_config(case(name)[0]).muse, dict(change)
        spark = change.pop("spark", None)
        how, change = "fields", {"muse": dataclasses.replace(
            layout, **change, **({"spark": dataclasses.replace(layout.spark, **spark)} if spark else {}))}
    check_difference_left_out(case(name), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", MUSE)
def test_greedy_serving_matches_hf_generate(name, case):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens."""
    assert type(assert_greedy_serving_matches_hf(case(name)[0])).__name__ == ARCHS[name][0]


@pytest.mark.parametrize("name,change,message", [
    ("muse_glimmer", dict(hidden_activation="gelu_pytorch_tanh"), "hidden_activation 'gelu_pytorch_tanh'"),
    ("muse_glimmer", dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
     "rope_type 'linear'"),
    ("muse_glimmer", dict(layer_rope_theta=[1e4, 0]), "layer_rope_theta must give one rope base"),
    ("muse_glimmer", dict(final_logit_softcapping=0.0), "final_logit_softcapping 0.0 is not supported"),
    ("muse_glimmer", dict(sliding_window=None), "sliding_attention layers need a sliding_window"),
    ("muse_spark", dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
    ("muse_spark", dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types must name"),
    ("muse_spark", dict(num_experts_per_tok=5), "num_experts_per_tok 5 must be in 1..num_local_experts"),
])
def test_configs_we_do_not_run_are_refused(name, change, message):
    config = muse_config(name, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)

