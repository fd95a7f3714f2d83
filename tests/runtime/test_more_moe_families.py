"""OLMoE, Granite 3 MoE, ERNIE 4.5 MoE and Hunyuan MoE (olmoe.py, granite_moe.py, ernie4_5_moe.py; their logits
against HF in test_moe_logits.py): the config fields each reads, the oracle noticing each of their differences left out (OLMoE's
clamp after the whole-width q/k norms and its top k not renormalised; Granite's multipliers and GraniteMoeShared's
shared MLP; ERNIE's correction bias and shared experts; Hunyuan's shared MLP), the refusals, and Granite's fused expert tensors split by
tensor and expert parallelism summing to the whole block.
"""

import dataclasses
import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from moe_checks import assert_shards_sum_to_the_block

from radixlm.runtime.models import loader


def test_config_fields(tiny_model):
    olmoe, granite, shared = (loader.read_model_config(tiny_model(a)) for a in ("olmoe", "granitemoe",
                                                                                   "granitemoeshared"))
    assert (olmoe.clip_qkv, olmoe.qk_norm, olmoe.attention_bias, olmoe.o_proj_bias) == (1.0, True, True, True)
    assert (olmoe.moe.num_experts, olmoe.moe.top_k, olmoe.moe.intermediate_size) == (8, 2, 32)
    assert (olmoe.moe.norm_topk_prob, olmoe.moe.sparse_layers, olmoe.moe.shared_expert_intermediate_size) == (
        False, (0, 1), 0)
    assert (granite.embedding_multiplier, granite.residual_multiplier, granite.attention_multiplier,
            granite.logits_scaling, granite.o_proj_bias) == (3.0, 0.5, 0.2, 2.0, True)
    assert granite.moe.norm_topk_prob and granite.moe.shared_expert_intermediate_size == 0
    assert (shared.moe.shared_expert_intermediate_size, shared.moe.shared_expert_gate) == (48, False)
    ernie = loader.read_model_config(tiny_model("ernie4_5_moe")).moe
    assert (ernie.sparse_layers, ernie.shared_expert_intermediate_size, ernie.shared_expert_gate) == ((1, 3), 64, False)
    assert (ernie.scoring, ernie.correction_bias, ernie.norm_topk_prob, ernie.router_float32) == ("softmax", True,
                                                                                                   True, True)
    hunyuan = loader.read_model_config(tiny_model("hunyuan_moe"))
    assert (hunyuan.moe.sparse_layers, hunyuan.moe.shared_expert_intermediate_size, hunyuan.moe.norm_topk_prob) == (
        (0, 1), 32, True)
    assert hunyuan.qk_norm_after_rope and hunyuan.o_proj_bias


def _leave_out(what, model, monkeypatch):
    """Change the loaded model (or its attention class) so that it runs without `what`."""
    if what == "whole-width q/k norms":
        from radixlm.runtime.models.llama import LlamaAttention
        from radixlm.runtime.models.minimax_m2 import WholeWidthQKNormAttention

        monkeypatch.setattr(WholeWidthQKNormAttention, "norm_qk", LlamaAttention.norm_qk)   # per head instead
    for layer in model.layers:
        if what == "clip_qkv":
            layer.self_attn.clip_after_norm = None
        elif what == "residual multiplier":
            layer.residual_multiplier = 1.0
    for _, block in model.sparse_blocks():
        if what == "top k kept unnormalised":
            block.moe = dataclasses.replace(block.moe, norm_topk_prob=True)
        elif what == "shared MLP":
            block.shared_down.zero_()
        elif what == "correction bias":
            block.correction_bias.zero_()


DIFFERENCES = [("olmoe", "clip_qkv"), ("olmoe", "whole-width q/k norms"), ("olmoe", "top k kept unnormalised"),
               ("granitemoe", "residual multiplier"), ("granitemoeshared", "shared MLP"),
               ("ernie4_5_moe", "correction bias"), ("ernie4_5_moe", "shared MLP"), ("hunyuan_moe", "shared MLP")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, tmp_path, monkeypatch):
    """The tiny model run with one of its differences left out leaves the bound of HF's own float noise."""
    path = tiny_model(arch)
    ids = random.Random(21).choices(range(loader.load_tokenizer(path).vocab_size), k=16)
    ref = HF(path)(ids)
    folder = tmp_path / "variant"                   # a model of its own (Paged caches one per folder)
    shutil.copytree(path, folder)
    paged = Paged(folder, reference=True)
    _leave_out(what, paged.model, monkeypatch)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, f"without {what}")


@pytest.mark.parametrize("field,value", [("moe_topk", [2, 3]),
                                         ("moe_intermediate_size", [64, 64]), ("num_shared_expert", [2, 2])])
def test_hunyuan_moe_refusals(field, value):
    from transformers import HunYuanMoEV1Config

    from radixlm.runtime.models.moe_config import MoEConfig

    config = HunYuanMoEV1Config(hidden_size=64, num_attention_heads=4, head_dim=16, num_experts=8, moe_topk=2,
                                intermediate_size=32, num_hidden_layers=2)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field):
        MoEConfig.from_hf(config, "HunYuanMoEV1ForCausalLM")


def test_refusals(tiny_model):
    from transformers import OlmoeConfig

    from radixlm.runtime.models.config import ModelConfig

    config = OlmoeConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_experts=8,
                         intermediate_size=32, num_hidden_layers=1)
    config.head_dim = 32
    config.architectures = ["OlmoeForCausalLM"]
    with pytest.raises(ValueError, match="head_dim"):
        ModelConfig.from_hf(config)
    model, _ = loader.load_model(tiny_model("olmoe"))
    with pytest.raises(ValueError, match="OlmoeForCausalLM: tensor parallelism"):
        model.enable_tensor_parallel(None)
    path = tiny_model("ernie4_5_moe")
    model, _ = loader.load_model(path)
    with pytest.raises(ValueError, match="Ernie4_5_MoeForCausalLM: tensor parallelism"):
        model.enable_tensor_parallel(None)
    mtp = ("model.mtp_block.0.mlp.gate.weight", torch.zeros(8, 64))    # skipped, as HF's _keys_to_ignore
    model.load_weights([*loader.iter_safetensors(path), mtp])


@pytest.mark.parametrize("ep_size", [1, 2])
def test_granite_sharded_blocks_sum_to_the_whole(ep_size, tiny_model):
    """GraniteMoeShared's layer-1 block from its fused checkpoint tensors (checkpoint_tensors splits them per
    expert) over 2 ranks (each expert's and the shared MLP's width, or whole experts with ep_size 2) sums to the
    unsplit block's output."""
    path = tiny_model("granitemoeshared")
    model, config = loader.load_model(path)
    prefix = "model.layers.1.mlp."
    full = [(n, t.double()) for n, t in model.checkpoint_tensors(loader.iter_safetensors(path)) if n.startswith(prefix)]
    assert_shards_sum_to_the_block(config, full, prefix, ep_size)
