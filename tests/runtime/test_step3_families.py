"""Step 3.7 served for text prompts (runtime/models/step3.py, step3_config.py; multimodal_wrappers.py).

Oracle: HF's Step3p7ForConditionalGeneration on the same tiny random weights (tiny_step3_models.py, vision tower
included), called with token ids only: its float64 logits with the derived bound (logits_oracle.py) for prefills, an
extend on a cached prefix, decodes and a chunk beside a decode, and its greedy generate through the real scheduler.
test_each_difference_matters proves the oracle notices each of what sets the language model apart left out.
"""

import dataclasses

import pytest
from logits_oracle import family_case
from paged_checks import (check_batched_prefills_chunks_and_decodes, check_decode_pair, check_difference_left_out,
                          check_extend_on_a_cached_prefix, check_prefill_single_and_batch, hf_logits_cache)
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_step3_models import LIMITS, SHARED_LIMITS, WINDOW, step3_config

from radixlm.runtime.models import multimodal_text, step3
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.layer_ops import rms_norm
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.moe_config import MoEConfig
from radixlm.runtime.models.step3_config import Step3Layers

LENGTH = 20
ARCH = "step3p7"
_LAYERS = Step3Layers(heads=(2, 4, 2), limits=(None, *LIMITS[1:]), shared_limits=(*SHARED_LIMITS[:2], None))
_MOE_FROM_HF = MoEConfig.from_hf.__func__


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


def _moe_with(**fields):
    return (MoEConfig, "from_hf", classmethod(lambda cls, hf, arch: dataclasses.replace(_MOE_FROM_HF(cls, hf, arch),
                                                                                        **fields)))


def _layers(**fields):
    return {"step3": dataclasses.replace(_LAYERS, **fields)}


def test_config_reads_each_option(tiny_model):
    """The tiny checkpoint's options as read: the text model by its model_type, every option that binds set."""
    path = tiny_model(ARCH)
    c = read_model_config(path)
    assert (c.architecture, c.language_model) == ("Step3p7ForConditionalGeneration", "Step3p5ForCausalLM")
    assert c.step3 == _LAYERS and c.layer_windows == (WINDOW, None, WINDOW)
    assert (c.rope_theta, c.rotary_dim, c.local_rope_theta, c.local_rotary_dim) == (500000.0, None, 10000.0, 8)
    assert (c.query_pre_attn_scalar, c.attention_bias, c.o_proj_bias, c.tie_word_embeddings) == (24, True, True, False)
    assert (c.moe.sparse_layers, c.moe.routed_scaling_factor, c.moe.shared_expert_intermediate_size) == ((1, 2), 2.5, 48)
    assert any(multimodal_text.is_vision_weight(k) for k, _ in iter_safetensors(path))


def test_prefill_extend_and_decode_match_hf(tiny_model):
    """Prefills alone and batched, extends after cached prefixes, two requests decoding past the window."""
    case = family_case(ARCH, tiny_model(ARCH), LENGTH, seed=17)
    check_prefill_single_and_batch(case)
    check_extend_on_a_cached_prefix(case, 11)
    check_decode_pair(case, 12, 15)


def test_batched_prefills_chunks_and_decodes(hf_logits):
    check_batched_prefills_chunks_and_decodes(hf_logits(ARCH), LENGTH)


DIFFERENCES = [
    ("Gemma's 1 + weight norms", "patch", (step3, "gemma_rms_norm", rms_norm)),
    ("the output gate", "patch", (step3.Step3Attention, "gate", lambda self, x: 1.0 + 0 * x[:, :self.num_heads])),
    ("query_pre_attn_scalar", "fields", {"query_pre_attn_scalar": None}),
    ("the sliding window", "fields", {"layer_windows": (64, None, 64)}),
    ("the full layers' rope base", "fields", {"rope_theta": 10000.0}),
    ("the sliding layers' partial rotation", "fields", {"local_rotary_dim": 16}),
    ("the experts' clamp", "fields", _layers(limits=(None, None, None))),
    ("the dense MLP's clamp", "fields", _layers(shared_limits=(None, SHARED_LIMITS[1], None))),
    ("the shared expert's clamp", "fields", _layers(shared_limits=(SHARED_LIMITS[0], None, None))),
    ("moe_router_scaling_factor", "patch", _moe_with(routed_scaling_factor=1.0)),
]


@pytest.mark.parametrize("left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(ARCH), left_out, how, change, tmp_path, monkeypatch)


def test_greedy_serving_matches_hf(tiny_model):
    """Through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    hf = assert_greedy_serving_matches_hf(tiny_model(ARCH))
    assert type(hf).__name__ == "Step3p7ForConditionalGeneration"


@pytest.mark.parametrize("change,message", [
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True is not supported"),
    (dict(gating="per-element"), "gating 'per-element' is not supported"),
    (dict(mlp_bias=True), "mlp_bias=True is not supported"),
    (dict(swiglu_limits=[7.0, 7.0]), "swiglu_limits must give one value for each of the 3 layers"),
    (dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types must name"),
    (dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                           "sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}}),
     "scaled rope on sliding layers is not supported"),
])
def test_configs_we_do_not_run_are_refused(change, message):
    config = step3_config(ARCH, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
