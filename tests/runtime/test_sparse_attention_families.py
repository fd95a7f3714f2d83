"""DeepSeek-V3.2, GLM-5 (GlmMoeDsa) and A.X K2 (runtime/models/dsa.py): DeepSeek Sparse Attention run as dense MLA
within index_topk tokens, against HF transformers on the same tiny random weights (logits_oracle.py,
tiny_dsa_models.py: index_topk 32, prompts of 22).

Each runs as the server runs it: a prefill alone and beside a shorter one, an extend on a cached prefix beside
another, two requests decoding together.  HF's indexer is shown to change nothing within index_topk and to bind past
it (why the context is capped there).  Then the oracle notices each difference from DeepSeek-V3 left out (V3.2 and
GLM-5: interleaved rope whatever the config says; A.X K2: the output gate, the raw half of q_gate_proj's input, the
two gated norms, and experts outside the best groups scored 0), the config fields read, and what is refused.
"""

import dataclasses
import json
import logging
import random
import shutil
from types import SimpleNamespace

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import (
    FamilyCases,
    check_decode_pair,
    check_extend_on_a_cached_prefix,
    check_prefill_single_and_batch,
)
from tiny_dsa_models import INDEX_TOPK
from tiny_more_models import TINY_DSA_ARCHS

from radixlm.runtime.models import loader
from radixlm.runtime.models.dsa_config import with_sparse_attention
from radixlm.runtime.models.moe_config import MoEConfig
from radixlm.runtime.models.moe_router import route
from radixlm.runtime.models.registry import get_model_class

LENGTH = 22   # prompt tokens, within index_topk
_CONFIG_CLASSES = {"deepseek_v32": "DeepseekV32Config", "glm_moe_dsa": "GlmMoeDsaConfig", "axk2": "AXK2Config"}
_case = FamilyCases(_CONFIG_CLASSES, LENGTH)   # one HF oracle per model for the whole file
_path = _case.path


@pytest.fixture(scope="module", params=TINY_DSA_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefill_extend_and_decode(fam):
    check_prefill_single_and_batch(fam)
    check_extend_on_a_cached_prefix(fam, 9)
    check_decode_pair(fam, 16, 18)


def test_hf_indexer_matters_only_past_index_topk(tiny_model):
    """HF's DeepSeek-V3.2 with its indexers' weights replaced gives the same logits, bit for bit, on a prompt within
    index_topk (every token is chosen) and other logits past it (the choice binds): what the context cap rests on."""
    _, _, hf, ids = _case("deepseek_v32", tiny_model)
    model = hf.hf.fp32
    longer = ids + random.Random(5).choices(range(model.config.vocab_size), k=INDEX_TOPK + 8 - LENGTH)

    def logits(tokens):
        with torch.no_grad():
            return model(torch.tensor([tokens])).logits[0]  # [L, V]

    before = logits(ids), logits(longer)
    indexers = {n: p.detach().clone() for n, p in model.named_parameters() if ".indexer." in n}
    try:
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in indexers:
                    p.copy_(torch.randn(p.shape, generator=gen))
        after = logits(ids), logits(longer)
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in indexers:
                    p.copy_(indexers[name])
    assert torch.equal(before[0], after[0])
    # the longer prompt's first index_topk positions: float32 noise only (its mask takes another kernel path)
    assert torch.allclose(before[1][:INDEX_TOPK], after[1][:INDEX_TOPK], atol=1e-5, rtol=0)
    assert not torch.allclose(before[1][INDEX_TOPK:], after[1][INDEX_TOPK:], atol=1e-3)


def _without(what, model, monkeypatch):
    """Change the loaded model, until monkeypatch undoes it, so that it runs without `what`."""
    for layer in model.layers:
        attn = layer.self_attn
        if what == "output gate":
            monkeypatch.setattr(attn, "queries", lambda q_a, queries=attn.queries: (queries(q_a)[0], None))
        elif what == "raw low-rank query":
            w = attn.q_gate_proj.clone()
            w[:, w.shape[1] // 2:] = 0   # q_gate_proj reading [normed | 0]
            monkeypatch.setitem(attn._parameters, "q_gate_proj", torch.nn.Parameter(w, requires_grad=False))
        elif what == "input norm gate":
            monkeypatch.setitem(layer._modules, "input_gate", torch.nn.Identity())   # submodules live there
        elif what == "post-attention norm gate" and layer.post_attention_gate is not None:
            monkeypatch.setitem(layer._modules, "post_attention_gate", None)


DIFFERENCES = [("deepseek_v32", "rotate-half rope"), ("glm_moe_dsa", "rotate-half rope"), ("axk2", "output gate"),
               ("axk2", "raw low-rank query"), ("axk2", "input norm gate"), ("axk2", "post-attention norm gate")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    if what == "rotate-half rope":   # read as a config saying rope_interleave False (GLM-4.7-Flash's): a model of
        folder = tmp_path / "variant"   # its own (Paged caches by path)
        shutil.copytree(path, folder)
        read = loader.read_model_config
        monkeypatch.setattr(loader, "read_model_config", lambda p: (lambda c: dataclasses.replace(
            c, mla=dataclasses.replace(c.mla, rope_interleave=False)))(read(p)))
        path = folder
    paged = Paged(path, reference=True)
    _without(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), hf(ids), f"without {what}")


def test_axk2_routing_scores_experts_outside_the_best_groups_zero():
    """HF's A.X K2 router on choices that are all negative (a bias of -1): the experts of the two groups left out,
    scored 0, beat those of the two best; DeepSeek-V3's -inf would keep them out."""
    from transformers.models.axk2.modeling_axk2 import AXK2TopkRouter

    config = SimpleNamespace(num_experts_per_tok=4, num_local_experts=8, hidden_size=8, routed_scaling_factor=2.5,
                             n_group=4, topk_group=2, norm_topk_prob=True)
    router = AXK2TopkRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.eye(8))
        router.e_score_correction_bias.fill_(-1.0)
    logits = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))  # [T, E]
    _, hf_weights, hf_ids = router(logits)
    rule = MoEConfig(num_experts=8, top_k=4, intermediate_size=1, norm_topk_prob=True, sparse_layers=(),
                     scoring="sigmoid", correction_bias=True, n_group=4, topk_group=2, outside_groups_score=0.0,
                     routed_scaling_factor=2.5)
    bias = router.e_score_correction_bias
    for outside, same in ((0.0, True), (float("-inf"), False)):
        weights, ids = route(logits, dataclasses.replace(rule, outside_groups_score=outside), bias)
        order, hf_order = ids.argsort(dim=-1), hf_ids.argsort(dim=-1)
        matches = torch.equal(ids.gather(1, order), hf_ids.gather(1, hf_order)) and torch.allclose(
            weights.gather(1, order), hf_weights.gather(1, hf_order))
        assert matches == same, f"outside groups scored {outside}"


def test_config_fields_and_the_context_cap(tiny_model, tmp_path, caplog):
    from radixlm.runtime.runner.model_runner import ModelRunner

    for arch in TINY_DSA_ARCHS:
        _path(arch, tiny_model)
    with caplog.at_level(logging.INFO, logger="radixlm.runtime.models.dsa_config"):
        v32 = loader.read_model_config(tiny_model("deepseek_v32"))
    assert "context capped at index_topk 32" in caplog.text
    assert (v32.context_length, v32.max_position_embeddings, v32.mla.rope_interleave, v32.dsa.indexer_layers,
            v32.moe.sparse_layers, v32.moe.n_group) == (INDEX_TOPK, 128, True, (0, 1), (1,), 4)
    interleave_off = _edited(tiny_model("deepseek_v32"), tmp_path / "a", rope_interleave=False)  # HF ignores it too
    assert loader.read_model_config(interleave_off).mla.rope_interleave
    glm = loader.read_model_config(tiny_model("glm_moe_dsa"))
    assert (glm.context_length, glm.dsa.indexer_layers, glm.mla.rope_interleave, glm.moe.n_group) == (
        INDEX_TOPK, (0,), True, 1)
    axk2 = loader.read_model_config(tiny_model("axk2"))
    assert (axk2.dsa.gated_norm_rank, axk2.moe.n_group, axk2.moe.outside_groups_score) == (8, 4, 0.0)
    light = loader.read_model_config(_edited(tiny_model("axk2"), tmp_path / "b", n_group=None, topk_group=None))
    assert (light.moe.n_group, light.moe.topk_group) == (1, 1)   # A.X K2-Light: no groups
    runner = ModelRunner(str(tiny_model("glm_moe_dsa")), max_total_tokens=64, context_length=100, device="cpu")
    assert runner.context_len == INDEX_TOPK   # a longer prompt gets the usual "longer than the context" error


def _edited(path, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(path, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_what_is_refused(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="unsupported model architecture 'DeepseekV4ForCausalLM'"):
        get_model_class("DeepseekV4ForCausalLM")   # compressed attention, hyper-connections: not served
    model, _ = loader.load_model(_path("axk2", tiny_model))
    with pytest.raises(ValueError, match="tensor parallelism"):
        model.enable_tensor_parallel(None)
    v32 = _path("deepseek_v32", tiny_model)
    config = loader.read_model_config(v32)   # HF's own config classes refuse q_lora_rank None before us
    no_low_rank = dataclasses.replace(config, mla=dataclasses.replace(config.mla, q_lora_rank=None))
    with pytest.raises(ValueError, match="q_lora_rank"):
        with_sparse_attention(no_low_rank, SimpleNamespace(index_topk=32, index_n_heads=2, index_head_dim=16))
    with pytest.raises(ValueError, match="attention_bias"):
        loader.read_model_config(_edited(v32, tmp_path / "b", attention_bias=True))
    with pytest.raises(ValueError, match="indexer_types"):
        loader.read_model_config(_edited(_path("glm_moe_dsa", tiny_model), tmp_path / "c",
                                         indexer_types=["shared", "full"]))
