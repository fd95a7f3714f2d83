"""Step 3.7 served for text prompts (runtime/models/step3.py, step3_config.py; multimodal_wrappers.py).

Oracle: HF's Step3p7ForConditionalGeneration on the same tiny random weights (tiny_step3_models.py, vision tower
included), called with token ids only: its float64 logits with the derived bound (logits_oracle.py) for prefills, an
extend on a cached prefix, decodes and a chunk beside a decode, and its greedy generate through the real scheduler.
test_each_difference_matters proves the oracle notices each of what sets the language model apart left out.
"""

import dataclasses

import pytest
from logits_oracle import family_case
from paged_checks import (
    check_batched_prefills_chunks_and_decodes,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_prefill_single_and_batch,
    hf_logits_cache,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import _assert_same_weights, _saved_as
from tiny_more_models import TINY_STEP3_ARCHS
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
    assert read_model_config(tiny_model("step3p7_yarn")).step3.heads == (8, 4, 8)
    assert (c.rope_theta, c.rotary_dim, c.local_rope_theta, c.local_rotary_dim) == (500000.0, None, 10000.0, 8)
    assert (c.query_pre_attn_scalar, c.attention_bias, c.o_proj_bias, c.tie_word_embeddings) == (24, True, True, False)
    moe = c.moe
    assert (moe.sparse_layers, moe.routed_scaling_factor, moe.shared_expert_intermediate_size) == ((1, 2), 2.5, 48)
    assert any(multimodal_text.is_vision_weight(k) for k, _ in iter_safetensors(path))


@pytest.mark.parametrize("arch", TINY_STEP3_ARCHS)
def test_prefill_extend_and_decode_match_hf(arch, tiny_model):
    """Prefills alone and batched, extends after cached prefixes, two requests decoding past the window (and past
    YaRN's original context)."""
    case = family_case(arch, tiny_model(arch), LENGTH, seed=17)
    check_prefill_single_and_batch(case)
    check_extend_on_a_cached_prefix(case, 11)
    check_decode_pair(case, 12, 15)


def test_batched_prefills_chunks_and_decodes(hf_logits):
    check_batched_prefills_chunks_and_decodes(hf_logits(ARCH), LENGTH)


DIFFERENCES = [
    (ARCH, "Gemma's 1 + weight norms", "patch", (step3, "gemma_rms_norm", rms_norm)),
    (ARCH, "the output gate", "patch", (step3.Step3Attention, "gate",
                                        lambda self, x: x.new_ones(len(x), self.num_heads))),
    (ARCH, "query_pre_attn_scalar", "fields", {"query_pre_attn_scalar": None}),
    (ARCH, "the sliding window", "fields", {"layer_windows": (64, None, 64)}),
    (ARCH, "the full layers' rope base", "fields", {"rope_theta": 10000.0}),
    (ARCH, "the sliding layers' partial rotation", "fields", {"local_rotary_dim": 16}),
    (ARCH, "the experts' clamp", "fields", _layers(limits=(None, None, None))),
    (ARCH, "the dense MLP's clamp", "fields", _layers(shared_limits=(None, SHARED_LIMITS[1], None))),
    (ARCH, "the shared expert's clamp", "fields", _layers(shared_limits=(SHARED_LIMITS[0], None, None))),
    (ARCH, "moe_router_scaling_factor", "patch", _moe_with(routed_scaling_factor=1.0)),
    ("step3p7_yarn", "the full layers' YaRN", "fields", {"rope_scaling": None}),
]


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


def test_module_names_load_the_same_weights(tiny_model, tmp_path):
    """The checkpoint under transformers 5's module names (HF's state dict: model.language_model.*, stacked
    mlp.experts.gate_up_proj [E, 2I, H], mlp.gate.e_score_correction_bias, mlp.shared_experts.*) loads as released
    (model.layers.*.moe.{gate,up,down}_proj stacked apart, moe.router_bias, share_expert.*)."""
    from transformers import AutoModelForImageTextToText

    path = tiny_model(ARCH)
    released = dict(iter_safetensors(path))
    assert "model.layers.1.moe.router_bias" in released and "model.layers.1.share_expert.up_proj.weight" in released
    modules = {k: v.contiguous() for k, v in AutoModelForImageTextToText.from_pretrained(path).state_dict().items()}
    assert "model.language_model.layers.1.mlp.experts.gate_up_proj" in modules
    _assert_same_weights(*_saved_as(path, tmp_path, modules))


def test_multi_token_prediction_layers_are_skipped(tiny_model, tmp_path):
    """Released checkpoints carry num_nextn_predict_layers layers after the last: skipped, as HF skips them."""
    path = tiny_model(ARCH)
    saved = dict(iter_safetensors(path))
    mtp = {k.replace("layers.2.", "layers.3."): v.clone() for k, v in saved.items() if k.startswith("model.layers.2.")}
    assert mtp
    _assert_same_weights(*_saved_as(path, tmp_path, {**saved, **mtp}))


def test_greedy_serving_matches_hf(tiny_model):
    """Through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    hf = assert_greedy_serving_matches_hf(tiny_model(ARCH))
    assert type(hf).__name__ == "Step3p7ForConditionalGeneration"


@pytest.mark.parametrize("change,message", [
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True is not supported"),
    (dict(gating="per-element"), "gating 'per-element' is not supported"),
    (dict(mlp_bias=True), "mlp_bias=True is not supported"),
    (dict(swiglu_limits=[7.0, 7.0]), "swiglu_limits must give a value for each of the 3 layers"),
    (dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types must name"),
    (dict(layer_types=["minimax_m3_sparse", "full_attention", "full_attention"]), "layer_types .* are not supported"),
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
