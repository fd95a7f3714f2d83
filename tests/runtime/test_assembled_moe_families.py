"""Solar Open, EXAONE MoE (K-EXAONE), FlexOlmo, Youtu-LLM and A.X K1 (runtime/models/assembled.py): families HF
assembles from other families' layers, against HF transformers on the same tiny random weights (logits_oracle.py,
tiny_assembled_models.py).

Each runs as the server runs it: a prefill alone and beside a shorter one, an extend on a cached prefix beside
another, two requests decoding together.  Then the oracle notices each difference left out (Solar Open: q/k/v
biases, every head dim rotating where GLM-4.5 rotates half; EXAONE MoE: no rope on its full layer, the window, the
correction bias beside the router; FlexOlmo: its attention biases, top k not renormalised; Youtu: interleaved rope;
A.X K1: the post-MLP norm, the correction bias), the config fields read, and what is refused.
"""

import dataclasses
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
from tiny_models import TINY_ASSEMBLED_ARCHS

from radixlm.runtime.models import loader

LENGTH = 22  # prompt tokens: past EXAONE MoE's window of 6
_CONFIG_CLASSES = {"solar_open": "SolarOpenConfig", "exaone_moe": "ExaoneMoeConfig", "flex_olmo": "FlexOlmoConfig",
                   "youtu": "YoutuConfig", "axk1": "AXK1Config"}
_case = FamilyCases(_CONFIG_CLASSES, LENGTH)   # one HF oracle per model for the whole file
_path = _case.path


@pytest.fixture(scope="module", params=TINY_ASSEMBLED_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefill_extend_and_decode(fam):
    check_prefill_single_and_batch(fam)
    check_extend_on_a_cached_prefix(fam, 9)
    check_decode_pair(fam, 16, 18)


def _without(what, model, monkeypatch):
    """Change the loaded model, until monkeypatch undoes it, so that it runs without `what` (parameters through the
    module's _parameters, which monkeypatch restores)."""
    for layer in model.layers:
        attn = layer.self_attn
        if what == "attention biases":
            zeros = torch.nn.Parameter(torch.zeros_like(attn.qkv_bias), requires_grad=False)
            monkeypatch.setitem(attn._parameters, "qkv_bias", zeros)
            monkeypatch.setitem(attn._parameters, "o_bias", None)
        elif what == "rope on every layer":
            monkeypatch.setattr(attn, "rope", True)
        elif what == "post-MLP norm" and layer.post_mlp_layernorm is not None:
            monkeypatch.setitem(layer._parameters, "post_mlp_layernorm", None)
    for _, block in model.sparse_blocks():
        if what == "correction bias":
            monkeypatch.setitem(block._parameters, "correction_bias", None)
        elif what == "groups":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, n_group=1, topk_group=1))
        elif what == "renormalised top k":
            monkeypatch.setattr(block, "moe", dataclasses.replace(block.moe, norm_topk_prob=True))
    if what == "windows":
        monkeypatch.setattr(model.attn_backend, "layer_variants", {})   # every layer's ordinary kernels


DIFFERENCES = [("solar_open", "attention biases"), ("solar_open", "half rotary"), ("solar_open", "groups"),
               ("exaone_moe", "rope on every layer"), ("exaone_moe", "windows"), ("exaone_moe", "correction bias"),
               ("flex_olmo", "attention biases"), ("flex_olmo", "renormalised top k"),
               ("youtu", "rotate-half rope"), ("axk1", "post-MLP norm"), ("axk1", "correction bias")]
_READ_OTHERWISE = {"half rotary": lambda c: dataclasses.replace(c, rotary_dim=16),   # GLM-4.5's, whose MoE Solar
                   "rotate-half rope": lambda c: dataclasses.replace(                # Open shares
                       c, mla=dataclasses.replace(c.mla, rope_interleave=False))}


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    if what in _READ_OTHERWISE:   # a config field read otherwise: a model of its own (Paged caches by path)
        folder = tmp_path / "variant"
        shutil.copytree(path, folder)
        read = loader.read_model_config
        monkeypatch.setattr(loader, "read_model_config", lambda p: _READ_OTHERWISE[what](read(p)))
        path = folder
    paged = Paged(path, reference=True)
    _without(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), hf(ids), f"without {what}")


def test_config_fields(tiny_model):
    for arch in TINY_ASSEMBLED_ARCHS:
        _path(arch, tiny_model)
    solar = loader.read_model_config(tiny_model("solar_open"))
    assert (solar.attention_bias, solar.o_proj_bias, solar.qk_norm, solar.rotary_dim, solar.head_dim) == (
        True, False, False, None, 32)
    assert (solar.moe.sparse_layers, solar.moe.scoring, solar.moe.n_group, solar.moe.topk_group,
            solar.moe.routed_scaling_factor, solar.moe.shared_expert_intermediate_size) == ((0, 1), "sigmoid", 4, 2,
                                                                                           2.5, 32)
    exaone = loader.read_model_config(tiny_model("exaone_moe"))
    assert (exaone.qk_norm, exaone.nope_layers, exaone.layer_windows) == (True, (1,), (6, None, 6))
    assert (exaone.moe.sparse_layers, exaone.moe.num_experts, exaone.moe.shared_expert_intermediate_size,
            exaone.moe.correction_bias, exaone.moe.norm_topk_prob) == ((0, 2), 8, 64, True, True)
    flex = loader.read_model_config(tiny_model("flex_olmo"))
    assert (flex.attention_bias, flex.o_proj_bias, flex.moe.sparse_layers, flex.moe.scoring,
            flex.moe.norm_topk_prob, flex.moe.shared_expert_intermediate_size) == (True, True, (0, 1), "softmax",
                                                                                    False, 0)
    youtu = loader.read_model_config(tiny_model("youtu"))
    assert (youtu.moe, youtu.mla.rope_interleave, youtu.tie_word_embeddings, youtu.head_dim) == (None, True, True, 40)
    axk1 = loader.read_model_config(tiny_model("axk1"))
    assert (axk1.moe.sparse_layers, axk1.moe.n_group, axk1.mla.q_lora_rank) == ((1,), 4, 24)


def _edited(path, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(path, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_what_is_refused(tiny_model, tmp_path):
    for arch in ("flex_olmo", "youtu", "axk1"):
        model, _ = loader.load_model(_path(arch, tiny_model))
        with pytest.raises(ValueError, match="tensor parallelism"):
            model.enable_tensor_parallel(None)
    solar = _path("solar_open", tiny_model)
    with pytest.raises(ValueError, match="partial rotary"):
        loader.read_model_config(_edited(solar, tmp_path / "a", rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}))
    with pytest.raises(ValueError, match="attention_bias"):
        loader.read_model_config(_edited(_path("axk1", tiny_model), tmp_path / "b", attention_bias=True))


def test_checkpoint_names_of_the_released_models(tiny_model):
    """EXAONE MoE's multi-token-prediction module (mtp.*) is skipped; A.X K1 reads its post-MLP norm under mlp. (HF's
    module name) too, drops those of dense layers, and routes with zero correction biases where the checkpoint has
    none, as HF does."""
    path = _path("exaone_moe", tiny_model)
    model, _ = loader.load_model(path)
    model.load_weights([*loader.iter_safetensors(path), ("mtp.layers.0.eh_proj.weight", torch.zeros(2, 2))])
    path = _path("axk1", tiny_model)
    model, _ = loader.load_model(path)
    named = []
    for name, t in loader.iter_safetensors(path):
        if name.endswith("e_score_correction_bias"):
            continue
        named.append((name.replace(".post_mlp_layernorm.", ".mlp.post_mlp_layernorm."), t))
    named.append(("model.layers.0.post_mlp_layernorm.weight", torch.ones(64)))
    model.load_weights(named)
    assert all(float(b.correction_bias.abs().sum()) == 0 for _, b in model.sparse_blocks())
    assert model.layers[0].post_mlp_layernorm is None

