"""DeepSeek-style mixture of experts (moe_router.py, moe_config.py): GLM-4.5, dots.llm1, DeepSeek-V2/V3, MiniMax-M2.

route() against HF's own router modules (DeepseekV3TopkRouter: sigmoid, correction bias, groups scored by their two
best; DeepseekV2TopkRouter: softmax, greedy or group_limited_greedy) on random logits, where the bias and the groups
change which experts win; MoEConfig read from DeepSeek-V2/V3 configs (which layers are sparse, the routing numbers)
and the routing rules we refuse; and on the tiny GLM-4.5 (tiny_models.py; its logits against HF's in
test_moe_logits.py) the oracle noticing each of correction bias, groups, scaling factor, shared expert and partial
rotary left out, and on the tiny MiniMax-M2 its correction bias, whole-width q/k norms and partial rotary.
"""

import dataclasses
import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from moe_checks import assert_shards_sum_to_the_block

from radixlm.runtime.models import loader
from radixlm.runtime.models.moe_config import MoEConfig
from radixlm.runtime.models.moe_router import route

E, H, T = 16, 16, 64


def _hf_router(router_class, config, bias=None):
    """HF's router with weight = I, so its router logits are its input rows."""
    router = router_class(config).eval()
    with torch.no_grad():
        router.weight.copy_(torch.eye(E, H))
        if bias is not None:
            router.e_score_correction_bias.copy_(bias)
    return router


def _same_choice(ours, theirs):
    """(weights, ids) pairs equal up to the order of each token's k choices."""
    (w, ids), (hw, hids) = ours, theirs
    order, horder = ids.argsort(dim=-1), hids.argsort(dim=-1)
    assert torch.equal(ids.gather(1, order), hids.gather(1, horder))
    torch.testing.assert_close(w.gather(1, order), hw.gather(1, horder), rtol=1e-6, atol=0)


def _v3(**kw):
    from transformers import DeepseekV3Config

    fields = dict(hidden_size=H, n_routed_experts=E, num_experts_per_tok=4, n_group=4, topk_group=2,
                  routed_scaling_factor=2.5, norm_topk_prob=True, num_hidden_layers=4, first_k_dense_replace=1,
                  n_shared_experts=2, moe_intermediate_size=8)
    return DeepseekV3Config(**{**fields, **kw})


def test_v3_routing_matches_hf_and_bias_and_groups_change_the_choice():
    modeling = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(T, E, generator=gen)                                       # [T, E]
    bias = 0.2 * torch.randn(E, generator=gen)                                      # [E]
    moe = MoEConfig.from_hf(_v3(), "DeepseekV3ForCausalLM")
    assert (moe.scoring, moe.correction_bias, moe.n_group, moe.topk_group, moe.group_score) == (
        "sigmoid", True, 4, 2, "top2_sum")
    for norm in (True, False):
        rule = dataclasses.replace(moe, norm_topk_prob=norm)
        hf = _hf_router(modeling.DeepseekV3TopkRouter, _v3(norm_topk_prob=norm), bias)
        with torch.no_grad():
            _same_choice(route(logits, rule, bias), hf(logits)[1:])
    ids = route(logits, moe, bias)[1]
    assert not torch.equal(ids.sort().values, route(logits, moe)[1].sort().values)          # the bias picks
    ungrouped = dataclasses.replace(moe, n_group=1, topk_group=1)
    assert not torch.equal(ids.sort().values, route(logits, ungrouped, bias)[1].sort().values)   # groups limit
    for row in ids.tolist():
        assert len({e // (E // 4) for e in row}) <= 2                               # within 2 of the 4 groups


@pytest.mark.parametrize("method", ["greedy", "group_limited_greedy"])
def test_v2_routing_matches_hf(method):
    modeling = pytest.importorskip("transformers.models.deepseek_v2.modeling_deepseek_v2")
    from transformers import DeepseekV2Config

    config = DeepseekV2Config(hidden_size=H, n_routed_experts=E, num_experts_per_tok=3, n_group=4, topk_group=2,
                              topk_method=method, routed_scaling_factor=16.0, num_hidden_layers=2,
                              num_attention_heads=4, moe_intermediate_size=8)
    moe = MoEConfig.from_hf(config, "DeepseekV2ForCausalLM")
    assert (moe.scoring, moe.correction_bias, moe.norm_topk_prob, moe.group_score) == ("softmax", False, False, "max")
    assert moe.n_group == (4 if method == "group_limited_greedy" else 1)
    logits = 3 * torch.randn(T, E, generator=torch.Generator().manual_seed(1))      # [T, E]
    with torch.no_grad():
        _same_choice(route(logits, moe), _hf_router(modeling.DeepseekV2TopkRouter, config)(logits)[1:])
    if method == "group_limited_greedy":
        greedy = dataclasses.replace(moe, n_group=1, topk_group=1)
        assert not torch.equal(route(logits, moe)[1].sort().values, route(logits, greedy)[1].sort().values)


def test_v3_and_v2_config_fields():
    from transformers import DeepseekV2Config

    v3 = MoEConfig.from_hf(_v3(), "DeepseekV3ForCausalLM")
    assert (v3.num_experts, v3.top_k, v3.intermediate_size, v3.sparse_layers) == (E, 4, 8, (1, 2, 3))
    assert (v3.shared_expert_intermediate_size, v3.shared_expert_gate, v3.routed_scaling_factor) == (16, False, 2.5)
    assert v3.router_float32 and v3.norm_topk_prob
    v2 = DeepseekV2Config(hidden_size=H, n_routed_experts=E, num_experts_per_tok=2, num_hidden_layers=6,
                          num_attention_heads=4, moe_intermediate_size=8, first_k_dense_replace=1, n_shared_experts=2)
    v2.moe_layer_freq = 2     # DeepSeek's own config field: every other layer from first_k_dense_replace on
    moe = MoEConfig.from_hf(v2, "DeepseekV2ForCausalLM")
    assert (moe.sparse_layers, moe.shared_expert_intermediate_size, moe.n_group) == ((2, 4), 16, 1)


@pytest.mark.parametrize("change,field", [
    (dict(n_group=3), "n_group"),                              # 16 experts do not split in 3
    (dict(topk_group=5), "topk_group"),                        # more groups kept than there are
    (dict(n_group=8, topk_group=1), "topk_group"),             # 1 group of 2 experts cannot hold the top 4
    (dict(topk_method="greedy"), "topk_method"),
    (dict(scoring_func="softmax"), "scoring_func"),
])
def test_routing_we_do_not_run_is_refused(change, field):
    config = _v3()
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(ValueError, match=field):
        MoEConfig.from_hf(config, "DeepseekV3ForCausalLM")


def test_v2_renormalisation_is_refused():
    from transformers import DeepseekV2Config

    config = DeepseekV2Config(hidden_size=H, n_routed_experts=E, num_experts_per_tok=2, num_hidden_layers=2,
                              num_attention_heads=4, moe_intermediate_size=8, norm_topk_prob=True)
    with pytest.raises(ValueError, match="norm_topk_prob"):
        MoEConfig.from_hf(config, "DeepseekV2ForCausalLM")


def _leave_out(what, model, monkeypatch):
    """Change the loaded model (or its attention class) so that it runs without `what`."""
    if what == "whole-width q/k norms":
        from radixlm.runtime.models.llama import LlamaAttention
        from radixlm.runtime.models.minimax_m2 import WholeWidthQKNormAttention

        monkeypatch.setattr(WholeWidthQKNormAttention, "norm_qk", LlamaAttention.norm_qk)   # per head instead
        return
    for _, b in model.sparse_blocks():
        if what == "correction bias":
            b.correction_bias.zero_()
        elif what == "groups":
            b.moe = dataclasses.replace(b.moe, n_group=1, topk_group=1)
        elif what == "scaling factor":
            b.moe = dataclasses.replace(b.moe, routed_scaling_factor=1.0)
        elif what == "shared expert":
            b.shared_down.zero_()


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    """arch -> (path, token ids, HF's logits), each computed once."""
    cases = {}

    def get(arch):
        if arch not in cases:
            path = tiny_model(arch)
            ids = random.Random(21).choices(range(loader.load_tokenizer(path).vocab_size), k=22)
            cases[arch] = (path, ids, HF(path)(ids))
        return cases[arch]
    return get


DIFFERENCES = [("glm4_moe", "correction bias"), ("glm4_moe", "groups"), ("glm4_moe", "scaling factor"),
               ("glm4_moe", "shared expert"), ("glm4_moe", "partial rotary"), ("minimax_m2", "correction bias"),
               ("minimax_m2", "whole-width q/k norms"), ("minimax_m2", "partial rotary")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, hf_logits, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    path, ids, ref = hf_logits(arch)
    folder = tmp_path / "variant"
    shutil.copytree(path, folder)
    if what == "partial rotary":
        read = loader.read_model_config
        monkeypatch.setattr(loader, "read_model_config", lambda p: dataclasses.replace(read(p), rotary_dim=None))
    paged = Paged(folder, reference=True)
    _leave_out(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, f"without {what}")


def test_minimax_m2_fields_and_refusals(tiny_model, tmp_path):
    import json

    path = tiny_model("minimax_m2")
    config = loader.read_model_config(path)
    assert (config.rotary_dim, config.qk_norm, config.attention_bias, config.moe.sparse_layers) == (16, True, False,
                                                                                                   (0, 1))
    assert (config.moe.scoring, config.moe.correction_bias, config.moe.n_group, config.moe.norm_topk_prob) == (
        "sigmoid", True, 1, True)
    model, _ = loader.load_model(path)
    with pytest.raises(ValueError, match="tensor parallelism"):
        model.enable_tensor_parallel(None)
    shutil.copytree(path, tmp_path / "fp8")
    config = json.loads((tmp_path / "fp8" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "fp8" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="FP8 checkpoints"):
        loader.load_model(tmp_path / "fp8")


def test_glm4_moe_skips_its_multi_token_prediction_layer(tiny_model):
    """GLM-4.5 checkpoints carry their MTP layer as model.layers.{num_layers}.*: skipped, as HF skips it."""
    path = tiny_model("glm4_moe")
    model, config = loader.load_model(path)
    mtp = [(f"model.layers.{config.num_layers}.{name}", torch.zeros(2, 2)) for name in ("eh_proj.weight",
                                                                                      "mlp.gate.weight")]
    model.load_weights([*loader.iter_safetensors(path), *mtp])
    mixtral, _ = loader.load_model(tiny_model("mixtral"))
    with pytest.raises(ValueError, match="unexpected weight"):     # elsewhere a layer past the last is refused
        mixtral.load_weights([*loader.iter_safetensors(tiny_model("mixtral")), ("model.layers.2.eh_proj.weight",
                                                                                torch.zeros(2, 2))])


@pytest.mark.parametrize("ep_size", [1, 2])
def test_sharded_blocks_sum_to_the_whole(ep_size, tiny_model):
    """GLM-4.5's layer-1 sparse block split over 2 ranks (sharding.py: each expert's width, or whole experts with
    ep_size 2; router, correction bias whole; the shared expert's width) sums to the unsplit block's output."""
    from radixlm.runtime.models.loader import iter_safetensors, read_model_config

    path = tiny_model("glm4_moe")
    config, prefix = read_model_config(path), "model.layers.1.mlp."
    full = [(n, t) for n, t in iter_safetensors(path) if n.startswith(prefix)]
    assert_shards_sum_to_the_block(config, full, prefix, ep_size)
