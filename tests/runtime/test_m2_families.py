"""The families HF builds from DeepSeek, Qwen3-MoE and GLM-4-MoE pieces (Mistral 4 and Mistral Small 4's
Mistral3ForConditionalGeneration over it, MiniCPM 5 MoE, Kolibri 1, Hy3, Laguna, Mellum, Flint) against HF
transformers on the same tiny random weights (logits_oracle.py, tiny_m2_models.py).

Each runs as the server runs it: a prefill alone and beside a shorter one, two requests decoding together (and
Mistral 4 an extend on a cached prefix beside another).  Then the oracle notices each difference left out
(DIFFERENCES), the config fields read, and what is refused.
"""

import dataclasses
import functools
import json
import shutil

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import (
    FamilyCases,
    check_decode_pair,
    check_extend_on_a_cached_prefix,
    check_prefill_single_and_batch,
)
from tiny_models import TINY_M2_ARCHS

from radixlm.runtime.models import loader
from radixlm.runtime.models.llama import LlamaAttention

LENGTH = 22  # prompt tokens: past Mistral 4's original context of 8 (its query scale starts), Kolibri 1's window of 6
_CONFIG_CLASSES = {"mistral4": "Mistral4Config", "minicpm5_moe": "MiniCPM5MoeConfig",
                   "kolibri1": "Kolibri1Config", "hy_v3": "HYV3Config", "laguna": "LagunaConfig",
                   "mellum": "MellumConfig", "flint": "FlintConfig"}
_case = FamilyCases(_CONFIG_CLASSES, LENGTH)   # one HF oracle per model for the whole file
_path = _case.path


@pytest.fixture(scope="module", params=TINY_M2_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefill_extend_and_decode(fam):
    check_prefill_single_and_batch(fam)
    if fam[0] == "mistral4":   # the latent cache read back by an extend; the others' caches are Llama's
        check_extend_on_a_cached_prefix(fam, 9)
    check_decode_pair(fam, 16, 18)


def _inside_mistral3(path, tmp_path):
    """The tiny Mistral 4 as Mistral Small 4 ships: the language model of a Mistral3ForConditionalGeneration, its
    weights under transformers 5's names (model.language_model.*) beside a vision tower's, which is skipped."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, Mistral3Config, PixtralVisionConfig

    folder = tmp_path / "mistral3"
    shutil.copytree(path, folder)
    vision = PixtralVisionConfig(image_size=16, patch_size=4, head_dim=16, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=1, num_attention_heads=2)
    config = Mistral3Config(text_config=AutoConfig.from_pretrained(path).to_dict(), vision_config=vision.to_dict(),
                            tie_word_embeddings=False)
    config.architectures = ["Mistral3ForConditionalGeneration"]
    config.save_pretrained(folder)
    tensors = {name.replace("model.", "model.language_model.", 1): t for name, t in loader.iter_safetensors(path)}
    tensors["model.vision_tower.ln_pre.weight"] = torch.ones(32)
    for file in folder.glob("*.safetensors*"):
        file.unlink()
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_mistral_small_4_serves_its_language_model(tiny_model, tmp_path):
    _, path, hf, ids = _case("mistral4", tiny_model)
    folder = _inside_mistral3(path, tmp_path)
    c = loader.read_model_config(folder)
    assert (c.architecture, c.language_model, c.query_scale) == ("Mistral3ForConditionalGeneration",
                                                                  "Mistral4ForCausalLM", (0.5, 8))
    assert_close(Paged(folder).step([(0, ids)]), hf(ids), "prefill")


def _without(what, model, monkeypatch):
    """Change the loaded model, until monkeypatch undoes it, so that it runs without `what`."""
    for layer in model.layers:
        attn = layer.self_attn
        if what == "output gate" and not hasattr(attn, "g_proj"):   # Llama's attention on the q, k and v rows
            ungated = attn.qkv_proj[:attn.q_size + 2 * attn.kv_size]
            monkeypatch.setitem(attn._parameters, "qkv_proj", torch.nn.Parameter(ungated, requires_grad=False))
            monkeypatch.setattr(attn, "forward", functools.partial(LlamaAttention.forward, attn))
        if what == "attention biases":
            monkeypatch.setitem(attn._parameters, "qkv_bias", None)
            monkeypatch.setitem(attn._parameters, "o_bias", None)
        elif what == "output gate" and hasattr(attn, "g_proj"):   # softplus(g) = 1 everywhere
            monkeypatch.setattr(attn, "forward", functools.partial(LlamaAttention.forward, attn))
        elif what == "rope on every layer":
            monkeypatch.setattr(attn, "rope", True)
        elif what == "post norms":
            for norm in ("post_self_attn_layernorm", "post_mlp_layernorm"):
                monkeypatch.setitem(layer._parameters, norm, torch.nn.Parameter(torch.ones_like(getattr(layer, norm)),
                                                                                 requires_grad=False))
    if what == "sliding layers' own rope":
        monkeypatch.setitem(model._buffers, "local_cos_sin", model.cos_sin)
    if what == "sinks":   # the kernels' variants as they were, less their sinks
        monkeypatch.setattr(model.attn_backend, "layer_variants", {
            i: {k: v for k, v in variant.items() if k != "sinks"} for i, variant in model.attn_backend.layer_variants.items()})
    if what == "windows":
        monkeypatch.setattr(model.attn_backend, "layer_variants", {})   # every layer's ordinary kernels
    for _, block in model.sparse_blocks():
        if what == "bias on the scores":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, bias_on_logits=False))
        elif what == "shared expert":
            monkeypatch.setitem(block._parameters, "shared_gate_up", None)
        elif what == "router softcap":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, router_softcap=None))
        elif what == "renormalised top k":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, norm_topk_prob=True))
        elif what == "routed scaling":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, routed_scaling_factor=1.0))
        elif what == "correction bias":
            monkeypatch.setitem(block._parameters, "correction_bias", None)
        elif what == "softmax scores":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, scoring="sigmoid"))
        elif what == "groups":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, n_group=1, topk_group=1))
    if what == "query scale":
        monkeypatch.setattr(model, "config", dataclasses.replace(model.config, query_scale=None))


DIFFERENCES = [("mistral4", "query scale"), ("mistral4", "softmax scores"), ("mistral4", "groups"),
               ("minicpm5_moe", "output gate"), ("minicpm5_moe", "correction bias"), ("minicpm5_moe", "groups"),
               ("kolibri1", "bias on the scores"), ("kolibri1", "rope on every layer"), ("kolibri1", "windows"),
               ("kolibri1", "post norms"), ("hy_v3", "attention biases"), ("hy_v3", "correction bias"),
               ("hy_v3", "routed scaling"), ("laguna", "output gate"), ("laguna", "router softcap"),
               ("laguna", "sliding layers' own rope"), ("laguna", "windows"), ("mellum", "sliding layers' own rope"),
               ("mellum", "renormalised top k"), ("flint", "sinks"), ("flint", "rope on every layer"),
               ("flint", "shared expert")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    paged = Paged(path, reference=True)
    _without(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), hf(ids), f"without {what}")


def test_config_fields(tiny_model):
    c = loader.read_model_config(_path("mistral4", tiny_model))
    assert (c.head_dim, c.rotary_dim, c.num_kv_heads, c.query_scale, c.mla.rope_interleave) == (40, 8, 1, (0.5, 8),
                                                                                                 True)
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.n_group, c.moe.topk_group,
            c.moe.group_score, c.moe.routed_scaling_factor, c.moe.shared_expert_intermediate_size,
            c.moe.router_float32) == ((1, 2), "softmax", False, 4, 2, "top2_sum", 2.5, 24, False)


def test_minicpm5_moe_config_fields(tiny_model):
    c = loader.read_model_config(_path("minicpm5_moe", tiny_model))
    assert (c.head_dim, c.num_kv_heads, c.attention_bias, c.qk_norm, c.rotary_dim) == (32, 2, False, False, None)
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.n_group, c.moe.router_float32,
            c.moe.shared_expert_intermediate_size, c.moe.shared_expert_gate) == ((0, 2), "sigmoid", True, 4, True, 48,
                                                                                 False)


def test_kolibri1_config_fields(tiny_model):
    c = loader.read_model_config(_path("kolibri1", tiny_model))
    assert (c.qk_norm, c.nope_layers, c.layer_windows, c.intermediate_size) == (True, (1,), (6, None, 6), 24)
    assert (c.moe.sparse_layers, c.moe.bias_on_logits, c.moe.correction_bias, c.moe.n_group, c.moe.router_float32,
            c.moe.shared_expert_intermediate_size, c.moe.shared_expert_gate) == ((0, 1, 2), True, True, 1, True, 40,
                                                                                 False)


def test_hy_v3_config_fields(tiny_model):
    c = loader.read_model_config(_path("hy_v3", tiny_model))
    assert (c.qk_norm, c.attention_bias, c.o_proj_bias, c.intermediate_size) == (True, True, True, 96)
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.norm_topk_prob, c.moe.n_group,
            c.moe.routed_scaling_factor, c.moe.shared_expert_intermediate_size) == ((0, 2), "sigmoid", True, True, 1,
                                                                                   2.5, 48)


def test_laguna_and_mellum_config_fields(tiny_model):
    c = loader.read_model_config(_path("laguna", tiny_model))
    assert (c.qk_norm, c.attention_bias, c.o_proj_bias, c.gate_per_head, c.layer_windows) == (True, True, True, False,
                                                                                               (6, None, 6))
    assert (c.rope_theta, c.rotary_dim, c.local_rope_theta, c.local_rotary_dim) == (500000.0, 16, 1000.0, 32)
    assert (c.moe.sparse_layers, c.moe.router_softcap, c.moe.routed_scaling_factor, c.moe.correction_bias,
            c.moe.shared_expert_intermediate_size, c.moe.router_float32) == ((0, 2), 1.5, 2.5, True, 40, False)
    m = loader.read_model_config(_path("mellum", tiny_model))
    assert (m.qk_norm, m.o_proj_bias, m.rotary_dim, m.layer_windows) == (True, True, None, (6, None, 6))
    assert (m.moe.scoring, m.moe.norm_topk_prob, m.moe.correction_bias, m.moe.shared_expert_intermediate_size) == (
        "softmax", False, False, 0)


def test_flint_config_fields(tiny_model):
    c = loader.read_model_config(_path("flint", tiny_model))
    assert (c.qk_norm, c.o_proj_bias, c.nope_layers, c.layer_windows) == (True, True, (1,), (6, None, 6))
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.norm_topk_prob,
            c.moe.shared_expert_intermediate_size, c.moe.shared_expert_gate) == ((0, 2), "sigmoid", False, False, 40,
                                                                                 False)


def _edited(path, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(path, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


REFUSED = [("mistral4", {"attention_bias": True}, "attention_bias"),
           ("minicpm5_moe", {"attention_bias": True}, "attention_bias"),
           ("laguna", {"num_attention_heads_per_layer": [4, 2, 4]}, "num_attention_heads_per_layer"),
           ("laguna", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                                           "sliding_attention": {"rope_type": "linear", "rope_theta": 1e4,
                                                                 "factor": 2.0}}}, "sliding layers"),
           ("mellum", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4,
                                                              "partial_rotary_factor": 0.5}}}, "partial_rotary_factor")]


@pytest.mark.parametrize("arch,changes,field", REFUSED, ids=[f"{a}-{f}" for a, _, f in REFUSED])
def test_what_is_refused(arch, changes, field, tiny_model, tmp_path):
    with pytest.raises(ValueError, match=field):
        loader.read_model_config(_edited(_path(arch, tiny_model), tmp_path, **changes))
