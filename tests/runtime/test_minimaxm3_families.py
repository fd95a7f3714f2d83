"""MiniMax-M3's language model (minimax_m3.py, minimax_m3_config.py) against HF transformers on the same tiny random
weights (logits_oracle.py, tiny_minimaxm3_models.py): HF's MiniMaxM3VLForCausalLM (transformers 5's module names) and
its whole conditional-generation model MiniMaxM3SparseForConditionalGeneration on a text prompt (the released names,
vision side dropped).  Prefills alone and batched, a chunked prefill, an extend on a cached prefix, decodes, and served
end to end; the oracle notices each difference left out; HF's own sparse attention is dense up to the capped context
and not past it; what is refused.
"""

import dataclasses
import json
import random
import shutil

import pytest
import torch
from logits_oracle import HF
from paged_checks import (
    FamilyCases,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_prefill_single_and_batch,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import LENGTH as VL_LENGTH
from test_vl_text_wrappers import assert_text_path_matches_hf
from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model
from tiny_more_models import TINY_MINIMAXM3_ARCHS

from radixlm.runtime.models import loader, minimax_m3
from radixlm.runtime.models.layer_ops import rms_norm, silu_mul
from radixlm.runtime.models.moe import grouped_experts
from radixlm.runtime.models.moe_router import route
from radixlm.runtime.models.packed_linear import linear

LENGTH = 24   # within the dense budget of 32 tokens (blocks of 4, the top 8)
BUDGET = 32
_case = FamilyCases({"minimax_m3": "MiniMaxM3VLTextConfig"}, LENGTH)
_path = _case.path


@pytest.fixture(scope="module", params=TINY_MINIMAXM3_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    """The whole MiniMaxM3SparseForConditionalGeneration over tiny_minimaxm3_models' text config, saved."""
    from tiny_vl_text_models import multimodal_config

    tok = make_tiny_tokenizer()
    text = _hf_config("minimax_m3", len(tok), tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>"))
    config = multimodal_config("minimax_m3_vl", text.to_dict(), {"vision": dict(patch_size=2)})
    return save_tiny_model(tmp_path_factory, config, "tiny-minimax_m3_vl", tok, seed=4200)


def test_prefill_chunks_extend_and_decode(fam):
    check_prefill_single_and_batch(fam)
    check_chunked_prefill(fam, 7)
    check_extend_on_a_cached_prefix(fam, 9)
    check_decode_pair(fam, 16, 18)


def test_served_greedy_matches_hf(tiny_model, vl):
    assert_greedy_serving_matches_hf(_path("minimax_m3", tiny_model))
    assert_greedy_serving_matches_hf(vl)


def test_conditional_generation_text_path_matches_hf(vl):
    """Prefill, extend after a cached prefix and decode of the whole VL model's text path, from the released names."""
    names = set(dict(loader.iter_safetensors(vl)))
    assert any(".block_sparse_moe.experts.0.w1." in n for n in names) and any(".index_q_proj." in n for n in names)
    assert VL_LENGTH <= BUDGET and loader.read_model_config(vl).context_length == BUDGET
    assert_text_path_matches_hf("minimax_m3_vl", vl)


def _route_without_bias(self, x):
    return route(linear(x, self.gate), self.moe, None)


def _without_shared(self, x, weights, ids):
    return grouped_experts(x, self.w13, self.w2, weights, ids, self.expert_offset, act=self.act)


def _moe(tiny_model, **changes):
    return {"moe": dataclasses.replace(loader.read_model_config(_path("minimax_m3", tiny_model)).moe, **changes)}


# (what is left out, how: "patch" a monkeypatch.setattr argument tuple, "fields" ModelConfig fields by a function of
# the tiny model fixture)
DIFFERENCES = [
    ("(1 + weight) norms", "patch", (minimax_m3, "gemma_rms_norm", rms_norm)),
    ("per-head q/k norms", "patch", (minimax_m3.GemmaNormAttention, "norm_qk", lambda self, qk: qk)),
    ("the clamped SwiGLU", "patch", (minimax_m3, "clamped_swiglu", lambda gate_up, limit, alpha: silu_mul(gate_up))),
    ("the correction bias", "patch", (minimax_m3.ClampedMoeBlock, "choose", _route_without_bias)),
    ("the shared MLP", "patch", (minimax_m3.ClampedMoeBlock, "experts_out", _without_shared)),
    ("partial rotary", "fields", lambda tiny_model: {"rotary_dim": None}),
    ("routed_scaling_factor", "fields", lambda tiny_model: _moe(tiny_model, routed_scaling_factor=1.0)),
    ("sigmoid scores", "fields", lambda tiny_model: _moe(tiny_model, scoring="softmax")),
]


@pytest.mark.parametrize("left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(left_out, how, change, fam, tiny_model, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    _, path, hf, ids = fam
    change = change(tiny_model) if how == "fields" else change
    check_difference_left_out((path, ids, hf(ids)), left_out, how, change, tmp_path, monkeypatch)


def test_released_expert_names_matter(vl, tmp_path, monkeypatch):
    """The released experts' w1 is the gate and w3 the up projection: swapped, the logits leave the bound."""
    ids = random.Random(21).choices(range(loader.read_model_config(vl).vocab_size), k=VL_LENGTH)
    change = (minimax_m3, "_EXPERT_PARTS", {"w1": "up_proj", "w3": "gate_proj", "w2": "down_proj"})
    check_difference_left_out((vl, ids, HF(vl)(ids)), "w1/w3 as gate/up", "patch", change, tmp_path, monkeypatch)


def test_context_capped_where_hf_attends_densely(fam):
    """HF's sparse layers, indexers and all, give what dense attention gives over the capped context (32 tokens) and
    not past it, where the indexers drop key blocks; the served context is that cap."""
    _, path, _, _ = fam
    c = loader.read_model_config(path)
    assert (c.context_length, c.minimax_m3.sparse_attention_layers, c.rotary_dim) == (BUDGET, (0, 2), 8)
    model = HF(path).fp64
    ids = torch.tensor([random.Random(5).choices(range(c.vocab_size), k=BUDGET + 12)])
    with torch.no_grad():
        sparse = model(ids).logits[0]
        for layer in model.model.layers:
            layer.self_attn.indexer = None
        dense = model(ids).logits[0]
    assert torch.allclose(sparse[:BUDGET], dense[:BUDGET], atol=1e-9, rtol=0)
    assert (sparse[BUDGET:] - dense[BUDGET:]).abs().amax() > 1e-3


def test_config_fields(fam):
    c = loader.read_model_config(fam[1])
    m = c.moe
    assert (c.qk_norm, c.head_dim, c.num_kv_heads, c.intermediate_size, c.minimax_m3.dense_intermediate_size) == (
        True, 16, 2, 24, 96)
    assert (m.sparse_layers, m.scoring, m.correction_bias, m.norm_topk_prob, m.routed_scaling_factor,
            m.shared_expert_intermediate_size, m.shared_expert_gate, m.swiglu_limit, m.swiglu_alpha) == (
        (1, 2), "sigmoid", True, True, 2.5, 40, False, 1.0, 1.5)


def _edited(path, tmp_path, **changes):
    folder = tmp_path / "edited"
    shutil.copytree(path, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


REFUSED = [({"layer_types": ["sliding_attention", "full_attention", "minimax_m3_sparse"]}, "layer_types"),
           ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope_type"),
           ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.35}},
            "partial_rotary_factor"),
           ({"index_topk_blocks": 0}, "index_topk_blocks"), ({"index_n_heads": 3}, "index_n_heads")]


@pytest.mark.parametrize("changes,field", REFUSED, ids=[f for _, f in REFUSED])
def test_what_is_refused(changes, field, fam, tmp_path):
    with pytest.raises(ValueError, match=field):
        loader.read_model_config(_edited(fam[1], tmp_path, **changes))
