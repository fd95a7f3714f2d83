"""Phi-3.5-MoE (phimoe.py), DBRX (dbrx.py), MiniCPM3 (minicpm3.py) and Arcee Trinity (afmoe.py) against HF
transformers on the same tiny random weights (logits_oracle.py; the tiny models: tiny_routed_models.py), through the
paged KV pool: prefill, extend on a cached prefix, decode batches, the torch reference ops with dense weights; the
config fields read, the oracle noticing each feature left out (sparsemixer's mask, the short mscale of LongRoPE, the
LayerNorms' bias; DBRX's clamp and p-norm; MiniCPM3's three scalings; Trinity's attention gate, NoPE full layers,
expert bias and mup embeddings), HF's own sparsemixer against ours, and the refusals.  A transformers without one of
the config classes skips that family.
"""

import dataclasses
import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close, family_case
from paged_checks import check_decode_pair, check_extend_on_a_cached_prefix, check_prefill_single_and_batch
from tiny_models import TINY_ROUTED_ARCHS

from radixlm.runtime.models import loader

LENGTH = 22
CONFIG_CLASSES = {"phimoe": "PhimoeConfig", "dbrx": "DbrxConfig", "minicpm3": "MiniCPM3Config",
                  "afmoe": "AfmoeConfig"}


def _built(arch, tiny_model):
    """The tiny model of `arch`, or a skip where this transformers has no config class for it."""
    import transformers

    if not hasattr(transformers, CONFIG_CLASSES[arch]):
        pytest.skip(f"this transformers has no {CONFIG_CLASSES[arch]}")
    return tiny_model(arch)


@pytest.fixture(scope="module", params=TINY_ROUTED_ARCHS)
def case(request, tiny_model):
    return family_case(request.param, _built(request.param, tiny_model), LENGTH)


def test_prefill_single_and_batch(case):
    check_prefill_single_and_batch(case)


def test_extend_and_decode_batch(case):
    check_extend_on_a_cached_prefix(case, prefix=15)
    check_decode_pair(case, start_a=17, start_b=16, end_b=20)


def test_reference_ops_and_dense_weights(case, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=5, reference=True)
    assert all(block.w13 is not None for _, block in paged.model.sparse_blocks())   # dense experts, not packed ones
    assert_close(paged.step([(0, ids[:18])]), ref[:18], "reference prefill")
    for i in range(18, 20):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_config_fields(tiny_model):
    phimoe = loader.read_model_config(_built("phimoe", tiny_model))
    assert (phimoe.attention_bias, phimoe.o_proj_bias, phimoe.layer_windows) == (True, True, (12, 12))
    assert (phimoe.moe.scoring, phimoe.moe.jitter_eps, phimoe.moe.top_k, phimoe.moe.sparse_layers) == (
        "sparsemixer", 0.3, 2, (0, 1))
    rope = phimoe.rope_scaling
    assert (rope["attention_factor"], rope["long_attention_factor"], rope["original_max_position_embeddings"]) == (
        1.3, 1.1, 64)
    dbrx = loader.read_model_config(_built("dbrx", tiny_model))
    assert (dbrx.num_kv_heads, dbrx.clip_qkv, dbrx.rope_theta, dbrx.intermediate_size, dbrx.rms_norm_eps) == (
        2, 0.6, 500000.0, 32, 1e-5)
    assert (dbrx.moe.num_experts, dbrx.moe.top_k, dbrx.moe.weight_norm_p, dbrx.moe.norm_topk_prob) == (8, 3, 2.0, False)
    minicpm3 = loader.read_model_config(_built("minicpm3", tiny_model))
    assert (minicpm3.embedding_multiplier, minicpm3.residual_multiplier, minicpm3.logits_scaling) == (
        3.0, 0.5 / 2 ** 0.5, 4.0)
    assert (minicpm3.mla.rope_interleave, minicpm3.mla.q_lora_rank, minicpm3.moe, minicpm3.tie_word_embeddings) == (
        False, 24, None, True)
    assert minicpm3.rope_scaling["short_factor"] == [1.0, 1.5, 2.0, 4.0]
    afmoe = loader.read_model_config(_built("afmoe", tiny_model))
    assert (afmoe.layer_windows, afmoe.nope_layers, afmoe.embedding_multiplier, afmoe.qk_norm, afmoe.o_proj_bias) == (
        (6, None, 6), (1,), 8.0, True, True)
    assert (afmoe.moe.sparse_layers, afmoe.moe.shared_expert_intermediate_size, afmoe.moe.routed_scaling_factor) == (
        (1, 2), 64, 2.5)
    assert (afmoe.moe.scoring, afmoe.moe.correction_bias, afmoe.moe.norm_topk_prob) == ("sigmoid", True, True)


def test_sparsemixer_is_hfs():
    """Our sparsemixer against HF's eval-mode one on random router logits, with masks from none to most experts."""
    hf_sparsemixer = pytest.importorskip("transformers.models.phimoe.modeling_phimoe").sparsemixer

    from radixlm.runtime.models.moe_router import sparsemixer

    scores = torch.randn(64, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for eps in (0.0, 0.05, 0.3, 2.0):
        weights, ids = sparsemixer(scores, eps)
        hf_weights, hf_ids = hf_sparsemixer(scores, jitter_eps=eps, training=False)
        assert torch.equal(ids, hf_ids)
        torch.testing.assert_close(weights.double(), hf_weights.float().double())


_CONFIG_FIELDS = {"embedding_multiplier": "embedding_multiplier", "logits_scaling": "logits_scaling",
                  "mup embeddings": "embedding_multiplier"}


def _leave_out(what, model):
    """Change the loaded model so that it runs without `what`."""
    if what == "short mscale":
        model.cos_sin /= 1.3
    elif what in _CONFIG_FIELDS:
        model.config = dataclasses.replace(model.config, **{_CONFIG_FIELDS[what]: 1.0})
    for layer in model.layers:
        if what == "layer norm bias":
            layer.input_layernorm.bias.zero_()
        elif what == "clip_qkv":
            layer.self_attn.clip_qkv = None
        elif what == "residual_multiplier":
            layer.residual_multiplier = 1.0
        elif what == "attention gate":
            layer.self_attn.gate_proj.zero_()         # sigmoid 0.5 on every output, made 1 by o_proj
            layer.self_attn.o_proj.mul_(2.0)
        elif what == "NoPE full layers":
            layer.self_attn.rope = True
    for _, block in model.sparse_blocks():
        if what == "sparsemixer mask":
            block.moe = dataclasses.replace(block.moe, jitter_eps=1e9)
        elif what == "p-norm":
            block.moe = dataclasses.replace(block.moe, weight_norm_p=1.0)   # renormalised to sum 1 instead
        elif what == "expert bias":
            block.correction_bias.zero_()


DIFFERENCES = [("phimoe", "sparsemixer mask"), ("phimoe", "short mscale"), ("phimoe", "layer norm bias"),
               ("dbrx", "clip_qkv"), ("dbrx", "p-norm"), ("minicpm3", "embedding_multiplier"),
               ("minicpm3", "residual_multiplier"), ("minicpm3", "logits_scaling"), ("afmoe", "attention gate"),
               ("afmoe", "NoPE full layers"), ("afmoe", "expert bias"), ("afmoe", "mup embeddings")]


@pytest.mark.parametrize("arch,what", DIFFERENCES, ids=[f"{a}-{w}" for a, w in DIFFERENCES])
def test_each_difference_matters(arch, what, tiny_model, tmp_path):
    """The tiny model run with one of its features left out leaves the bound of HF's own float noise."""
    path = _built(arch, tiny_model)
    ids = random.Random(21).choices(range(loader.load_tokenizer(path).vocab_size), k=16)
    ref = HF(path)(ids)
    folder = tmp_path / "variant"                   # a model of its own (Paged caches one per folder)
    shutil.copytree(path, folder)
    paged = Paged(folder, reference=True)
    with torch.no_grad():
        _leave_out(what, paged.model)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, ids)]), ref, f"without {what}")


def test_phimoe_hub_name_and_refusals(tiny_model):
    PhimoeConfig = pytest.importorskip("transformers").PhimoeConfig

    from radixlm.runtime.models.config import ModelConfig

    def config(**kw):
        c = PhimoeConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                         intermediate_size=32, num_hidden_layers=1, **kw)
        c.architectures = ["PhimoeForCausalLM"]
        return c

    hub = config()
    hub.architectures = ["PhiMoEForCausalLM"]     # the released checkpoints' (remote code's) spelling
    assert ModelConfig.from_hf(hub).architecture == "PhimoeForCausalLM"
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        ModelConfig.from_hf(config(num_experts_per_tok=3))
    with pytest.raises(ValueError, match="lm_head_bias"):
        ModelConfig.from_hf(config(lm_head_bias=True))
    model, _ = loader.load_model(_built("phimoe", tiny_model))
    with pytest.raises(ValueError, match="PhimoeForCausalLM: tensor parallelism"):
        model.enable_tensor_parallel(None)


def test_refusals_of_dbrx_and_one_rank(tiny_model):
    """DBRX's config refusals; DBRX, MiniCPM3 and Arcee Trinity refuse tensor parallelism."""
    from transformers import DbrxConfig

    from radixlm.runtime.models.config import ModelConfig

    def config(ffn=None, **kw):
        c = DbrxConfig(d_model=64, n_heads=4, n_layers=1, attn_config={"kv_n_heads": 2},
                       ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2, **(ffn or {})}, **kw)
        c.architectures = ["DbrxForCausalLM"]
        return c

    assert ModelConfig.from_hf(config()).moe.weight_norm_p == 1.0
    with pytest.raises(ValueError, match="ffn_act_fn"):
        ModelConfig.from_hf(config({"ffn_act_fn": {"name": "gelu"}}))
    with pytest.raises(ValueError, match="rope_type"):
        ModelConfig.from_hf(config(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}))
    with pytest.raises(ValueError, match="num_experts_per_tok 5"):
        ModelConfig.from_hf(config({"moe_top_k": 5}))
    for arch in ("dbrx", "minicpm3", "afmoe"):
        model, config = loader.load_model(_built(arch, tiny_model))
        with pytest.raises(ValueError, match=f"{config.architecture}: tensor parallelism"):
            model.enable_tensor_parallel(None)


@pytest.mark.parametrize("field,value", [("score_func", "softmax"), ("route_norm", False), ("n_group", 2)])
def test_afmoe_refuses_routing_options_hf_does_not_run(field, value):
    AfmoeConfig = pytest.importorskip("transformers").AfmoeConfig

    from radixlm.runtime.models.moe_config import MoEConfig

    config = AfmoeConfig(hidden_size=64, num_attention_heads=4, head_dim=16, num_experts=8, num_experts_per_tok=2,
                         moe_intermediate_size=32, num_hidden_layers=2)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field):
        MoEConfig.from_hf(config, "AfmoeForCausalLM")
