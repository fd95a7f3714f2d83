"""Cosmos 3 Edge, Molmo2 and DeepSeek-OCR 2 served for text prompts (runtime/models/multimodal_wrappers.py,
molmo2_text.py, deepseek_ocr2_config.py).

Oracle: HF's conditional-generation model of each (AutoModelForImageTextToText) on the same tiny random weights,
vision side included, called with token ids only as a text chat is: its float64 logits with the derived bound
(logits_oracle.py) and its greedy generate.  The tiny models are tiny_vl4_models.py's.
"""

import dataclasses
import json
import random

import pytest
import torch
from logits_oracle import HF
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import _assert_same_weights, _saved_as, assert_text_path_matches_hf
from tiny_vl4_models import VL4, make_vl4, vl4_config

from radixlm.runtime.models import molmo2_text
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.moe_config import MoEConfig

LENGTH = 20
# Chameleon's tests: test_vl4_chameleon.py
WRAPPERS = tuple(name for name, (model_type, _, _) in VL4.items() if model_type != "chameleon")


@pytest.fixture(scope="module")
def vl4(tmp_path_factory):
    """vl4(name) -> its tiny folder, built once per module."""
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_vl4(tmp_path_factory, name)
        return built[name]
    return folder


@pytest.mark.parametrize("name", WRAPPERS)
def test_prefill_extend_and_decode_match_hf(name, vl4):
    assert_text_path_matches_hf(name, vl4(name))


def test_each_text_model_is_the_one_of_its_layer(vl4):
    """Cosmos 3 Edge runs as Arcee, Molmo2 as Qwen 3 or (qk_norm_type "olmo" with norm_after) OLMo 2; none ties its
    lm head."""
    models = {name: read_model_config(vl4(name)) for name in WRAPPERS}
    assert {n: c.language_model for n, c in models.items()} == {
        "cosmos3_edge": "ArceeForCausalLM", "molmo2": "Qwen3ForCausalLM", "molmo2_olmo": "Olmo2ForCausalLM",
        "deepseek_ocr2": "DeepseekOcr2TextForCausalLM"}
    assert not any(c.tie_word_embeddings for c in models.values())


def test_molmo2_embedding_tables_as_released_load_the_same_weights(vl4, tmp_path):
    """Molmo2's released tables (wte.embedding of the vocabulary's rows, wte.new_embedding of the 8 additional ones)
    load as the split transformers saves (elsewhere than at the vocabulary's end); the additional rows are dropped."""
    saved = dict(iter_safetensors(vl4("molmo2")))
    vocab, table = read_model_config(vl4("molmo2")).vocab_size, "model.transformer.wte."
    rows = torch.cat([saved[table + "embedding"], saved[table + "new_embedding"]])
    assert rows.shape[0] == vocab + 8 and saved[table + "embedding"].shape[0] != vocab
    released = {**saved, table + "embedding": rows[:vocab].clone(), table + "new_embedding": rows[vocab:].clone()}
    model, reference = _saved_as(vl4("molmo2"), tmp_path, released)
    _assert_same_weights(model, reference)
    assert torch.equal(model.embed_tokens.to(rows.dtype), rows[:vocab])


_MOE_FROM_HF = MoEConfig.from_hf.__func__


def _moe_with(**fields):
    """MoEConfig.from_hf with `fields` changed (a monkeypatch.setattr argument tuple)."""
    return (MoEConfig, "from_hf", classmethod(lambda cls, hf, arch: dataclasses.replace(_MOE_FROM_HF(cls, hf, arch),
                                                                                        **fields)))


DIFFERENCES = [
    ("cosmos3_edge", "the untied lm head of a config that ties", "fields", {"tie_word_embeddings": True}),
    ("molmo2", "ff_proj as [up; gate]", "patch", (molmo2_text, "_FF_PROJ", ("gate_proj", "up_proj"))),
    ("molmo2_olmo", "ff_proj as [up; gate]", "patch", (molmo2_text, "_FF_PROJ", ("gate_proj", "up_proj"))),
    ("deepseek_ocr2", "routed_scaling_factor", "patch", _moe_with(routed_scaling_factor=1.0)),
    ("deepseek_ocr2", "the experts of the best group only", "patch", _moe_with(n_group=1, topk_group=1)),
]


@pytest.mark.parametrize("name,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(name, left_out, how, change, vl4, tmp_path, monkeypatch):
    """HF's Cosmos 3 Edge declares no tied weights, so its lm head stays its own though the config ties; Molmo2's
    released ff_proj is the up projection, then the gate; DeepSeek-OCR 2 scales its routed experts by
    routed_scaling_factor and picks them in the best topk_group of n_group groups: doing otherwise leaves the bound of
    HF's own float noise."""
    path = vl4(name)
    if name == "cosmos3_edge":
        assert json.loads((path / "config.json").read_text())["tie_word_embeddings"] is True
    ids = random.Random(21).choices(range(read_model_config(path).vocab_size), k=LENGTH)
    check_difference_left_out((path, ids, HF(path)(ids)), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("name", ["molmo2", "molmo2_olmo", "cosmos3_edge", "deepseek_ocr2"])
def test_module_names_load_the_same_weights(name, vl4, tmp_path):
    """The checkpoint under transformers 5's module names (HF's state dict: model.language_model.*, Molmo2's q/k/v
    and gate/up apart, one embedding of vocabulary + additional rows; Cosmos 3 Edge's fc1, fc2) loads as released."""
    from transformers import AutoModelForImageTextToText

    path = vl4(name)
    modules = {k: v.contiguous() for k, v in AutoModelForImageTextToText.from_pretrained(path).state_dict().items()}
    assert modules.keys() != dict(iter_safetensors(path)).keys()
    _assert_same_weights(*_saved_as(path, tmp_path, modules))


def test_cosmos3_edge_skips_its_generator(vl4, tmp_path):
    """Released Cosmos 3 Edge checkpoints carry an image and action generator beside the reasoner (HF drops it):
    skipped."""
    saved = dict(iter_safetensors(vl4("cosmos3_edge")))
    extra = ["action_modality_embed", "time_embedder.linear_1.weight", "proj_in.weight", "norm_moe_gen.weight",
             "layers.0.mlp_moe_gen.up_proj.weight", "layers.1.input_layernorm_moe_gen.weight",
             "layers.0.self_attn.add_q_proj.weight", "layers.1.self_attn.norm_added_k.weight"]
    _assert_same_weights(*_saved_as(vl4("cosmos3_edge"), tmp_path, {**saved, **{k: torch.ones(2) for k in extra}}))


@pytest.mark.parametrize("name", ["cosmos3_edge", "molmo2_olmo", "deepseek_ocr2"])
def test_greedy_serving_matches_hf_generate(name, vl4):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens."""
    path = vl4(name)
    hf = assert_greedy_serving_matches_hf(path)
    assert type(hf).__name__ == json.loads((path / "config.json").read_text())["architectures"][0]


@pytest.mark.parametrize("name,change,message", [
    ("molmo2", dict(norm_after=True), "qk_norm_type 'qwen3' with norm_after=True"),
    ("molmo2_olmo", dict(norm_after=False), "qk_norm_type 'olmo' with norm_after=False"),
    ("molmo2", dict(attention_bias=True), "qkv_bias=True"),
    ("molmo2", dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                    rope_scaling_layers=[1]), r"rope_scaling_layers \[1\]"),
    ("deepseek_ocr2", dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types must name"),
    ("deepseek_ocr2", dict(mlp_bias=True), "mlp_bias=True is not supported"),
    ("deepseek_ocr2", dict(topk_method="noaux_tc"), "topk_method 'noaux_tc' is not supported"),
])
def test_configs_we_do_not_run_are_refused(name, change, message):
    """Molmo2: the layouts neither Qwen 3 nor OLMo 2 has, q/k/v biases without Qwen 3's o_proj bias, scaled rope on
    some layers only; DeepSeek-OCR 2: MLP kinds not given per layer, MLP biases, DeepSeek-V3's routing."""
    config = vl4_config(name, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
