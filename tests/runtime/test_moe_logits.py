"""Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss, GLM-4.5 and dots.llm1 against HF transformers on the same tiny random weights (the oracle and its
bound: logits_oracle.py), through the paged KV pool as the server runs them on a CPU (expert weights packed per
expert, grouped by expert), and once with dense weights and the torch ops.  The tiny models (tiny_models.py)
cover each family's routing rule: softmax over the top-k logits (Mixtral), softmax then top-k renormalised
(Qwen3-MoE) or not (Qwen2-MoE, with its gated shared expert), and dense layers among the sparse ones
(mlp_only_layers, decoder_sparse_step); GLM-4.5 and dots.llm1: sigmoid scores with a correction bias, expert groups,
scaled weights and an un-gated shared expert (their own checks: test_deepseek_style_moe.py).
"""

import random

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from tiny_models import TINY_MOE_ARCHS

from radixlm.runtime.models.loader import load_model, load_tokenizer, read_model_config


@pytest.fixture(scope="module", params=TINY_MOE_ARCHS)
def moe_case(request, tiny_model):
    path = tiny_model(request.param)
    ids = random.Random(7).choices(range(load_tokenizer(path).vocab_size), k=22)
    return path, HF(path), ids


def test_prefill_single_and_batch(moe_case):
    path, hf, ids = moe_case
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    both = paged.step([(1, ids[:13]), (2, ids)])
    assert_close(both[:13], hf(ids[:13]), "batched prefill, request 1")
    assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_chunked_and_decode(moe_case):
    path, hf, ids = moe_case
    other = ids[5:] + ids[:5]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    for start in range(0, 15, 5):                               # request 0: chunked prefill, 5 tokens a chunk
        assert_close(paged.step([(0, ids[start:start + 5])]), ref[start:start + 5], f"chunk at {start}")
    out = paged.step([(0, ids[15:18]), (3, other[:12])])        # an extend on a cached prefix beside a prefill
    assert_close(out[:3], ref[15:18], "extend after prefix 15")
    for i in range(4):                                          # decode steps of two requests
        out = paged.step([(0, [ids[18 + i]]), (3, [other[12 + i]])])
        assert_close(out[0], ref[18 + i], f"decode {i}, request 0")
        assert_close(out[1], ref_other[12 + i], f"decode {i}, request 3")


def test_reference_ops_and_dense_weights(moe_case, monkeypatch):
    from radixlm.runtime.models import layer_ops

    path, hf, ids = moe_case
    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    ref = hf(ids)
    paged = Paged(path, seed=4, reference=True)
    assert paged.model.sparse_blocks()[0][1].w13 is not None      # dense stacked experts, not packed ones
    assert_close(paged.step([(0, ids[:12])]), ref[:12], "reference prefill")
    for i in range(12, 16):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_moe_config_fields(tiny_model):
    q3, mix, q2 = (read_model_config(tiny_model(a)) for a in ("qwen3_moe", "mixtral", "qwen2_moe"))
    assert (q3.moe.num_experts, q3.moe.top_k, q3.moe.intermediate_size, q3.moe.norm_topk_prob) == (8, 2, 32, True)
    assert q3.moe.sparse_layers == (0, 2) and q3.qk_norm and q3.intermediate_size == 96
    assert mix.moe.norm_topk_prob and mix.moe.sparse_layers == (0, 1) and not mix.attention_bias
    assert (q2.moe.sparse_layers, q2.moe.shared_expert_intermediate_size, q2.moe.norm_topk_prob) == ((1, 3), 48, False)
    assert q2.attention_bias and not q2.o_proj_bias and q2.is_moe


def test_missing_expert_weight_is_refused(tiny_model):
    from radixlm.runtime.models.loader import iter_safetensors

    path = tiny_model("mixtral")
    model, _ = load_model(path)
    named = list(iter_safetensors(path))
    with pytest.raises(ValueError, match="missing"):
        model.load_weights(n for n in named if n[0] != "model.layers.1.block_sparse_moe.experts.7.w3.weight")


def test_route_follows_each_family_rule():
    from radixlm.runtime.models.moe import route
    from radixlm.runtime.models.moe_config import MoEConfig

    def rule(renormalize):
        return MoEConfig(num_experts=4, top_k=2, intermediate_size=8, norm_topk_prob=renormalize, sparse_layers=(0,))

    logits = torch.tensor([[2.0, 0.5, 1.0, -1.0]])                                 # [1, E]
    w, ids = route(logits, rule(True))
    assert ids.tolist() == [[0, 2]]
    assert torch.allclose(w, torch.softmax(torch.tensor([[2.0, 1.0]]), -1))       # Mixtral: softmax of the top k
    w, _ = route(logits, rule(False))
    assert torch.allclose(w, torch.softmax(logits, -1)[:, [0, 2]])                # Qwen, norm_topk_prob False
