"""Gemma 3n (gemma3n.py, gemma3n_layers.py, gemma3n_config.py) against HF transformers on the tiny models of
tests/tiny_gemma3n_models.py: prefills, an extend on a cached prefix, chunked prefill, decodes and a mixed step over
the KV that the last layers reuse; the language model of Gemma3nForConditionalGeneration; the config's fields and
refusals; the oracle noticing each of Gemma 3n's features left out; and the scheduler serving it greedily as HF
generates.
"""

import dataclasses

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import (
    FamilyCases,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_triton_backend,
)
from scheduler_harness import assert_greedy_serving_matches_hf

from radixlm.runtime.models import gemma3n, gemma3n_layers, gemma4
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gemma3n_config import HardTokens
from radixlm.runtime.models.loader import read_model_config

LENGTH = 26   # past the sliding window (6)
CASES = FamilyCases({"gemma3n": "Gemma3nTextConfig", "gemma3n_mm": "Gemma3nConfig"}, LENGTH)
_Layer = gemma3n_layers.Gemma3nDecoderLayer
_per_layer_inputs = gemma4.Gemma4ForCausalLM.per_layer_inputs


def test_text_model_as_served(tiny_model):
    case = CASES("gemma3n", tiny_model)
    _, path, _, ids = case
    assert max(ids) >= read_model_config(path).gemma4.per_layer_vocab   # ids past the per-layer vocabulary
    check_prefill_single_and_batch(case)
    check_extend_on_a_cached_prefix(case, prefix=17)
    check_chunked_prefill(case, chunk=9)
    check_decode_pair(case, start_a=5, start_b=7, end_b=9)
    check_mixed_step(case, a=20, b=15)


def test_multimodal_checkpoints_language_model(tiny_model, tmp_path, monkeypatch):
    """Over ids of the vision and the audio embedders too (HF embeds them by those); without them the oracle
    notices."""
    case = CASES("gemma3n_mm", tiny_model)
    _, path, hf, ids = case
    assert {e.name for e in read_model_config(path).gemma3n.hard_tokens
            if any(e.offset <= i < e.end for i in ids)} == {"embed_vision", "embed_audio"}
    check_chunked_prefill(case, chunk=13)
    check_decode_pair(case, start_a=20, start_b=22, end_b=23)
    check_difference_left_out((path, ids, hf(ids)), "the multimodal embedders", "attr",
                              (gemma3n.HardTokenEmbedder, "forward", lambda self, ids, x, rows: x), tmp_path, monkeypatch)


def test_config_fields(tiny_model):
    c = read_model_config(tiny_model("gemma3n"))
    g, a = c.gemma3n, c.gemma4
    assert (g.altup_inputs, g.altup_active, g.altup_correct_scale, g.laurel_rank) == (3, 1, True, 8)
    assert g.intermediate == (48, 64, 32, 48, 40) and c.intermediate_size == 64
    assert g.sparsity == (0.95, 0.6, 0.0, 0.0, 0.0)
    assert a.kv_source == (0, 1, 2, 1, 2) and c.kv_layers == 3 and a.per_layer_input == 8
    assert a.rope == ((100.0, 8, 1.0), (100.0, 8, 1.0), (1000.0, 8, 1.0), (100.0, 8, 1.0), (1000.0, 8, 1.0))
    assert c.layer_windows == (6, 6, None, 6, None) and (c.sm_scale, c.final_softcap) == (1.0, 3.0)
    m = read_model_config(tiny_model("gemma3n_mm"))
    hard = (HardTokens("embed_vision", 331, 361, 30, 16, 1e-6), HardTokens("embed_audio", 361, 391, 30, 24, 1e-6))
    assert (m.language_model, m.gemma3n, m.gemma4) == ("Gemma3nForCausalLM", dataclasses.replace(g, hard_tokens=hard), a)


@pytest.mark.parametrize("change, field", [
    ({"rope_parameters": {"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1e4}}}, "rope_type 'linear'"),
    ({"altup_active_idx": 3}, "altup_active_idx"),
    ({"activation_sparsity_pattern": [1.0, 0.0, 0.0, 0.0, 0.0]}, "activation_sparsity_pattern"),
    ({"attention_bias": True}, "attention_bias"),
    ({"num_kv_shared_layers": 4}, "num_kv_shared_layers"),
    ({"hidden_size_per_layer_input": 0}, "hidden_size_per_layer_input"),
])
def test_refusals(tiny_model, change, field):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model("gemma3n"))
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(config)


def _layers(c, **change):
    return {"gemma3n": dataclasses.replace(c.gemma3n, **change)}


# (what is left out, how (check_difference_left_out's), the change: of the tiny model's ModelConfig for "fields")
DIFFERENCES = [
    ("AltUp's prediction", "attr", (_Layer, "predict", lambda self, streams: streams)),
    ("AltUp's correction coefficients", "attr",
     (_Layer, "correct", lambda self, p, out: p + (out - p[self.active]))),
    ("the active stream", "fields", lambda c: _layers(c, altup_active=0)),
    ("the streams' rescaling", "attr", (gemma3n, "rescaled", lambda x, rms: x)),
    ("LAuReL", "attr", (_Layer, "laurel", lambda self, x: torch.zeros_like(x))),
    ("the sparse gates", "fields", lambda c: _layers(c, sparsity=(0.0,) * 5)),
    ("correct_output_scale", "fields", lambda c: _layers(c, altup_correct_scale=False)),
    ("row 0 for ids past the per-layer vocabulary", "attr",
     (gemma4.Gemma4ForCausalLM, "per_layer_inputs",
      lambda self, ids, x: _per_layer_inputs(self, ids.clamp(max=self.embed_tokens_per_layer.shape[0] - 1), x))),
    ("the KV of the last earlier layer of the type", "fields",
     lambda c: {"gemma4": dataclasses.replace(c.gemma4, kv_source=(0, 1, 2, 0, 0))}),
    ("the sliding windows", "fields", lambda c: {"layer_windows": (None,) * 5}),
    ("the final soft-cap", "fields", lambda c: {"final_softcap": None}),
]


@pytest.mark.parametrize("what, how, change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(tiny_model, what, how, change, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    _, path, hf, ids = CASES("gemma3n", tiny_model)
    if how == "fields":
        change = change(read_model_config(path))
    check_difference_left_out((path, ids, hf(ids)), what, how, change, tmp_path, monkeypatch)


def test_reference_attention_kernels(tiny_model):
    _, path, hf, ids = CASES("gemma3n", tiny_model)
    assert_close(Paged(path, reference=True).step([(0, ids)]), hf(ids), "reference kernels")


def test_triton_backend_under_the_interpreter(tiny_model):
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    arch, path, hf, ids = CASES("gemma3n", tiny_model)
    check_triton_backend((arch, path, hf, ids[:9]), "cpu", split=8)   # past the window, then a decode step


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["gemma3n", "gemma3n_mm"])
def test_triton_backend_on_cuda(tiny_model, arch):
    check_triton_backend(CASES(arch, tiny_model), "cuda", split=22)


@pytest.mark.parametrize("arch", ["gemma3n", "gemma3n_mm"])
def test_served_greedily_as_hf_generates(tiny_model, arch):
    assert_greedy_serving_matches_hf(tiny_model(arch))
