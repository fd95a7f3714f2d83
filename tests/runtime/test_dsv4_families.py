"""Ergo, Zaya, Beam, Dots 3 Note and Hy V4 (ergo.py, zaya.py, beam.py, dots3.py, hy_v4.py and their *_config.py)
against HF transformers on the same tiny random weights (logits_oracle.py, tiny_dsv4_models.py): prefills alone and beside a shorter one, a chunked prefill, two requests decoding together past
the window, and served end to end (HF's greedy tokens through the scheduler and the radix cache).  Then the oracle
notices each difference left out (DIFFERENCES), the config fields read, and what is refused.
"""

import dataclasses
import json
import shutil

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import FamilyCases, check_chunked_prefill, check_decode_pair, check_prefill_single_and_batch
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import TINY_DSV4_ARCHS

from radixlm.runtime.models import beam, ergo, hy_v4, loader, zaya
from radixlm.runtime.models.layer_ops import silu_mul

LENGTH = 22   # past the window of 6
_CONFIG_CLASSES = {"ergo": "ErgoConfig", "zaya": "ZayaConfig", "beam": "BeamConfig",
                   "dots3_note": "Dots3NoteTextConfig", "hy_v4": "HYV4Config"}
_case = FamilyCases(_CONFIG_CLASSES, LENGTH)   # one HF oracle per model for the whole file
_path = _case.path


@pytest.fixture(scope="module", params=TINY_DSV4_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefill_chunks_and_decode(fam):
    check_prefill_single_and_batch(fam)
    check_chunked_prefill(fam, 7)
    check_decode_pair(fam, 16, 18)


@pytest.mark.parametrize("arch", TINY_DSV4_ARCHS)
def test_served_greedy_matches_hf(arch, tiny_model):
    assert_greedy_serving_matches_hf(_path(arch, tiny_model))


def _without(what, model, monkeypatch):
    """Change the loaded model, until monkeypatch undoes it, so that it runs without `what`."""
    for layer in model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if what == "residual gates":   # branch + residual
            monkeypatch.setattr(ergo, "residual_gate", lambda branch, residual, weight: branch + residual)
        elif what == "global attention scale":
            monkeypatch.setattr(attn, "qk_scale", None)
        elif what == "expert norms" and isinstance(mlp, ergo.ErgoMoE):
            monkeypatch.setitem(mlp._parameters, "expert_norms", torch.nn.Parameter(
                mlp.expert_norms.mean(dim=0, keepdim=True).expand_as(mlp.expert_norms), requires_grad=False))
        elif what == "shared expert norm" and isinstance(mlp, ergo.ErgoMoE):
            monkeypatch.setitem(mlp._parameters, "shared_norm", torch.nn.Parameter(
                torch.ones_like(mlp.shared_norm), requires_grad=False))
        elif what == "output gate bias" and hasattr(attn, "gate_bias"):
            monkeypatch.setitem(attn._parameters, "gate_bias", torch.nn.Parameter(torch.zeros_like(attn.gate_bias)))
        elif what == "groups" and hasattr(mlp, "moe"):
            monkeypatch.setattr(mlp, "moe", dataclasses.replace(mlp.moe, n_group=1, topk_group=1))
        elif what == "post norms":
            names = ("post_attention_norm", "post_ffn_norm", "post_attention_layernorm", "post_feedforward_layernorm")
            for name in (n for n in names if hasattr(layer, n)):   # Ergo's and Beam's
                monkeypatch.setitem(layer._parameters, name, torch.nn.Parameter(torch.ones_like(getattr(layer, name)),
                                                                                 requires_grad=False))
        if what == "latent scales" and hasattr(attn, "q_scale"):
            monkeypatch.setattr(attn, "q_scale", 1.0)
            monkeypatch.setattr(attn, "kv_scale", 1.0)
        elif what == "each layer's score scale" and hasattr(attn, "score_ratio"):
            monkeypatch.setattr(attn, "score_ratio", 1.0)
        elif what == "rope key norm" and hasattr(attn, "k_rope_norm"):
            monkeypatch.setitem(attn._parameters, "k_rope_norm", torch.nn.Parameter(torch.ones_like(attn.k_rope_norm)))
        elif what == "head gate" and hasattr(attn, "k_rope_norm"):
            monkeypatch.setitem(attn._parameters, "g_proj", torch.nn.Parameter(torch.zeros_like(attn.g_proj)))
        if what == "output gate per head dim" and hasattr(attn, "sinks"):
            monkeypatch.setitem(attn._parameters, "gate_proj", torch.nn.Parameter(torch.zeros_like(attn.gate_proj)))
        elif what == "expert clamp" and isinstance(mlp, hy_v4.ClampedExperts):
            monkeypatch.setattr(mlp, "act", silu_mul)
        if what == "key temperature":
            monkeypatch.setitem(attn._parameters, "temp", torch.nn.Parameter(torch.ones_like(attn.temp)))
        elif what == "router state from the layer before" and mlp.state_scale is not None:
            monkeypatch.setitem(mlp._parameters, "state_scale", None)
        elif what == "balancing biases":
            monkeypatch.setitem(mlp._parameters, "balancing", torch.nn.Parameter(torch.zeros_like(mlp.balancing)))
    if what == "windows":
        monkeypatch.setattr(model.attn_backend, "layer_variants", {})   # every layer's ordinary kernels
    if what == "delayed values":   # this token's delayed projection instead of the last one's
        monkeypatch.setattr(zaya, "delayed", lambda states, layer, d: d)
    if what == "q/k convolutions":   # the residual paths alone
        monkeypatch.setattr(zaya, "cca_convolve", lambda states, layer, x, convs: torch.zeros_like(x))
    if what == "residual scales":
        monkeypatch.setattr(zaya, "_scaled", lambda h, x, scales: h.float() + x)
    if what == "sliding layers' own rope":
        monkeypatch.setitem(model._buffers, "local_cos_sin", model.cos_sin)
    if what == "query scale of the layers without rope":
        monkeypatch.setattr(beam, "nope_query_scale", lambda positions: None)
    if what == "depth-scaled residual adds":
        monkeypatch.setattr(beam, "depth_scaled_add", lambda branch, residual, i: branch + residual)
    if what == "logit softcap":
        monkeypatch.setattr(model, "config", dataclasses.replace(model.config, final_softcap=None))
    if what == "sinks":   # the kernels' variants as they were, less their sinks
        monkeypatch.setattr(model.attn_backend, "layer_variants", {
            i: {k: v for k, v in variant.items() if k != "sinks"} for i, variant in model.attn_backend.layer_variants.items()})
    if what == "learned stream mixes":
        monkeypatch.setattr(hy_v4, "stream_weights", lambda streams, fn, eps: streams.new_zeros(
            streams.shape[0], fn.shape[0], dtype=torch.float32))
    if what == "lm head bias":
        monkeypatch.setitem(model._parameters, "lm_head_bias", None)


DIFFERENCES = [("ergo", "residual gates"), ("ergo", "global attention scale"), ("ergo", "expert norms"),
               ("ergo", "shared expert norm"), ("ergo", "post norms"), ("ergo", "windows"), ("ergo", "interleaved rope"),
               ("zaya", "delayed values"), ("zaya", "q/k convolutions"), ("zaya", "key temperature"),
               ("zaya", "router state from the layer before"), ("zaya", "balancing biases"),
               ("zaya", "residual scales"), ("zaya", "sliding layers' own rope"), ("zaya", "windows"),
               ("zaya", "lm head bias"), ("beam", "output gate bias"),
               ("beam", "query scale of the layers without rope"), ("beam", "depth-scaled residual adds"),
               ("beam", "logit softcap"), ("beam", "groups"), ("beam", "post norms"), ("beam", "windows"),
               ("dots3_note", "latent scales"), ("dots3_note", "each layer's score scale"),
               ("dots3_note", "rope key norm"), ("dots3_note", "head gate"), ("dots3_note", "sliding layers' own rope"),
               ("dots3_note", "windows"), ("hy_v4", "sinks"), ("hy_v4", "output gate per head dim"),
               ("hy_v4", "expert clamp"), ("hy_v4", "learned stream mixes")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    if what == "interleaved rope":   # the checkpoint's rows as they are, rotated as halves (a copy: Paged caches)
        monkeypatch.setattr(ergo, "interleaved_to_half_order", lambda d, r: torch.arange(d))
        path = shutil.copytree(path, tmp_path / "copy")
    paged = Paged(path, reference=True)
    _without(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), hf(ids), f"without {what}")


def test_ergo_config_fields(tiny_model):
    c = loader.read_model_config(_path("ergo", tiny_model))
    assert (c.head_dim, c.num_kv_heads, c.qk_norm, c.intermediate_size, c.hidden_act) == (16, 2, True, 96, "relu2")
    assert (c.nope_layers, c.layer_windows, c.global_attention_scale, c.tie_word_embeddings) == (
        (2,), (6, 6, None, 6), 2.5, False)
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.norm_topk_prob, c.moe.n_group,
            c.moe.routed_scaling_factor, c.moe.shared_expert_intermediate_size, c.moe.router_float32) == (
        (1, 2, 3), "sigmoid", True, True, 1, 2.5, 40, True)


def _edited(path, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(path, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


REFUSED = [("ergo", {"rope_parameters": {"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                                         "full_attention": None}}, "rope_parameters"),
           ("ergo", {"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                         "full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
            "full_attention"),
           ("ergo", {"tie_word_embeddings": True}, "tie_word_embeddings"),
           ("zaya", {"layer_types": ["hybrid", "full_attention", "hybrid"]}, "layer_types"),
           ("zaya", {"rope_parameters": {"hybrid": {"rope_type": "default", "rope_theta": 1e4},
                                         "hybrid_sliding": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}}},
            "sliding layers"),
           ("beam", {"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                         "full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
            "full_attention"),
           ("hy_v4", {"attention_bias": True}, "attention_bias"),
           ("hy_v4", {"indexer_types": ["shared", "full", "full"]}, "indexer_types"),
           ("dots3_note", {"rope_parameters": {
               "indexed_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 1e3}}}, "rope_parameters"),
           ("beam", {"rope_parameters": {"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                                         "full_attention": None}}, "rope_parameters")]


@pytest.mark.parametrize("arch,changes,field", REFUSED, ids=[f"{a}-{f}" for a, _, f in REFUSED])
def test_what_is_refused(arch, changes, field, tiny_model, tmp_path):
    with pytest.raises(ValueError, match=field):
        loader.read_model_config(_edited(_path(arch, tiny_model), tmp_path, **changes))


def test_zaya_config_fields(tiny_model):
    from radixlm.runtime.models.zaya_config import ZayaLayout

    c = loader.read_model_config(_path("zaya", tiny_model))
    assert c.zaya == ZayaLayout((2, 2), 32, 4, True) and c.zaya.conv_kernel == 3 and c.kv_layers == 3
    assert (c.layer_windows, c.rope_theta, c.rotary_dim, c.local_rope_theta, c.local_rotary_dim) == (
        (6, None, 6), 500000.0, 8, 1000.0, 8)
    assert (c.attention_bias, c.o_proj_bias, c.tie_word_embeddings, c.intermediate_size, c.moe) == (
        True, True, True, 24, None)


def test_zaya_without_attention_bias(tiny_model, tmp_path):
    """attention_bias False: no q/k/v/o biases (the convolutions keep theirs), against HF on the same weights."""
    from logits_oracle import family_case
    from safetensors.torch import save_file

    folder = _edited(_path("zaya", tiny_model), tmp_path, attention_bias=False)
    dropped = tuple(f".{p}.bias" for p in ("q_proj", "k_proj", "v_proj_current", "v_proj_delayed", "o_proj"))
    kept = {name: t for name, t in loader.iter_safetensors(folder) if not name.endswith(dropped)}
    for file in folder.glob("*.safetensors*"):
        file.unlink()
    save_file(kept, str(folder / "model.safetensors"))
    _, path, hf, ids = family_case("zaya", folder, 14)
    paged = Paged(path)
    assert_close(paged.step([(0, ids[:10])]), hf(ids)[:10], "prefill")
    for i in range(10, 14):
        assert_close(paged.step([(0, [ids[i]])])[0], hf(ids)[i], f"decode at {i}")


def test_beam_config_fields(tiny_model):
    c = loader.read_model_config(_path("beam", tiny_model))
    assert (c.qk_norm, c.attention_bias, c.nope_layers, c.layer_windows, c.final_softcap) == (True, False, (1,),
                                                                                              (6, None, 6), 3.0)
    assert (c.moe.sparse_layers, c.moe.scoring, c.moe.correction_bias, c.moe.n_group, c.moe.topk_group,
            c.moe.routed_scaling_factor, c.moe.shared_expert_intermediate_size, c.moe.router_float32) == (
        (1, 2), "sigmoid", True, 4, 2, 2.5, 0, True)


def test_dots3_note_config_fields(tiny_model):
    c = loader.read_model_config(_path("dots3_note", tiny_model))
    assert (c.dots3.heads, [m.kv_lora_rank for m in c.dots3.shapes], c.head_dim, c.num_kv_heads) == (
        (4, 2, 4), [16, 32, 16], 40, 1)
    assert (c.layer_windows, c.rope_theta, c.local_rope_theta, c.rotary_dim, c.context_length) == (
        (None, 6, None), 10000.0, 1000.0, 8, 64)
    assert (c.dsa.indexer_layers, c.moe.sparse_layers, c.moe.shared_expert_intermediate_size, c.moe.n_group) == (
        (0, 2), (1, 2), 40, 4)


def test_hy_v4_config_fields(tiny_model):
    from radixlm.runtime.models.hy_v4_config import HyperStreams

    c = loader.read_model_config(_path("hy_v4", tiny_model))
    assert (c.hyper_streams, c.head_dim, c.num_kv_heads, c.rotary_dim, c.context_length) == (
        HyperStreams(3, 2.0, 1e-6, 0.5), 24, 1, 8, 64)
    assert (c.dsa.indexer_layers, c.moe.sparse_layers, c.moe.shared_expert_intermediate_size, c.moe.n_group,
            c.moe.routed_scaling_factor) == ((0, 2), (1, 2), 24, 4, 2.5)
