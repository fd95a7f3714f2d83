"""The Mamba-2 hybrids beyond Granite 4.0 against HF: IBM Bamba (bamba.py), NVIDIA Nemotron-H (nemotron_h.py, with
latent relu^2 experts, and Nemotron Nano 2's dense blocks) and TII Falcon-H1 (falcon_h1.py; with the mixer's norm and
biases, and without).  Logits of prefills, chunked prefills, decodes and a mixed step over each request row's state;
their config fields (only Nemotron-H's attention blocks in the KV pool); the oracle noticing Bamba's half-head rotary,
Nemotron-H's expert choice bias and its attention without rotary, Falcon-H1's norm before the gate and its key
multiplier each left out; and what they cannot run refused.
"""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from paged_checks import check_chunked_prefill, check_decode_pair, check_mixed_step, check_prefill_single_and_batch
from tiny_models import TINY_MAMBA_ARCHS

from radixlm.runtime.models import loader, nemotron_h_config
from radixlm.runtime.models.config import ModelConfig

pytest.importorskip("transformers.models.nemotron_h")
pytest.importorskip("transformers.models.bamba")


@pytest.fixture(scope="module", params=TINY_MAMBA_ARCHS)
def case(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), 24)


def test_logits_of_prefills_chunks_decodes_and_mixed_steps(case):
    check_prefill_single_and_batch(case)
    check_chunked_prefill(case, 7)
    if case[0] in ("bamba", "nemotron_h"):   # successive decodes; the others a decode beside a prefill
        check_decode_pair(case, 12, 16, 19)
    else:
        check_mixed_step(case, 12, 9)


def test_config_fields(tiny_model):
    b = loader.read_model_config(tiny_model("bamba"))
    m = b.mamba2
    assert (m.mamba_layers, m.num_heads, m.head_dim, m.n_groups, m.d_state, m.conv_kernel, m.block_kinds) == (
        (0, 1, 3), 8, 16, 2, 8, 4, ())
    assert b.kv_layers == 1 and b.rotary_dim == 8 and b.head_dim == 16 and b.moe is None and b.intermediate_size == 48
    assert (b.embedding_multiplier, b.residual_multiplier, b.attention_multiplier, b.logits_scaling) == (1, 1, None, 1)
    n = loader.read_model_config(tiny_model("nemotron_h"))
    assert n.mamba2.block_kinds == ("mamba", "moe", "attention", "mamba", "moe") and n.mamba2.mamba_layers == (0, 3)
    assert n.kv_layers == 1 and n.nope_layers == (0, 1, 2, 3, 4) and n.mamba2.moe_latent_size == 24
    moe = n.moe
    assert (moe.sparse_layers, moe.num_experts, moe.top_k, moe.intermediate_size, moe.shared_expert_intermediate_size,
            moe.scoring, moe.correction_bias, moe.n_group, moe.topk_group, moe.routed_scaling_factor) == (
        (1, 4), 8, 2, 32, 40, "sigmoid", True, 2, 1, 1.5)
    d = loader.read_model_config(tiny_model("nemotron_h_dense"))
    assert d.moe is None and d.kv_layers == 1 and d.mamba2.proj_bias and d.mamba2.moe_latent_size is None
    assert d.mamba2.block_kinds == ("mamba", "mlp", "attention", "mamba", "mlp") and d.rms_norm_eps == 1e-5
    f = loader.read_model_config(tiny_model("falcon_h1"))
    m = f.mamba2
    assert (m.mamba_layers, m.intermediate, m.gated_norm, m.proj_bias, m.out_proj_bias) == (
        (0, 1, 2), 96, "norm_first", True, True)
    assert f.kv_layers == 3 and f.rotary_dim is None and f.attention_bias and f.o_proj_bias
    assert (f.embedding_multiplier, f.logits_scaling, m.parallel.ssm_sections, m.parallel.key) == (
        1.5, 1 / 0.8, (0.5, 1.5, 0.8, 1.25, 2.0), 1.4)
    plain = loader.read_model_config(tiny_model("falcon_h1_plain"))
    assert plain.mamba2.gated_norm == "none" and not plain.mamba2.out_proj_bias and plain.tie_word_embeddings


def test_the_hub_layer_pattern_is_read():
    """The released configs name the blocks in hybrid_override_pattern: M mamba, * attention, - MLP, E experts."""
    hf = SimpleNamespace(hybrid_override_pattern="M-*E")
    assert nemotron_h_config._block_kinds(hf) == ("mamba", "mlp", "attention", "moe")


def _leave_out(what, model, monkeypatch):
    from radixlm.runtime.models.falcon_h1 import FalconH1Layer
    from radixlm.runtime.models.llama import LlamaAttention
    from radixlm.runtime.models.nemotron_h import NemotronHMoE
    from radixlm.runtime.models.rope import rope_cos_sin_cache

    if what == "half-head rotary":   # the whole head rotated instead
        whole = rope_cos_sin_cache(dataclasses.replace(model.config, rotary_dim=None), model.cos_sin.shape[0])
        monkeypatch.setattr(model, "cos_sin", whole.to(model.cos_sin.dtype))
    for layer in model.layers:
        if isinstance(layer, FalconH1Layer):
            if what == "norm before the gate":
                monkeypatch.setattr(layer.mamba, "m", dataclasses.replace(layer.mamba.m, gated_norm="gate_first"))
            elif what == "key multiplier":
                attn, key = layer.self_attn, model.config.mamba2.parallel.key
                monkeypatch.setattr(attn, "qkv_proj", torch.nn.Parameter(attn.qkv_proj.clone()))
                attn.qkv_proj.data[attn.q_size:attn.q_size + attn.kv_size] /= key
            continue
        mixer = layer.mixer
        if what == "attention without rotary" and isinstance(mixer, LlamaAttention):
            monkeypatch.setattr(mixer, "rope", True)
        elif what == "expert choice bias" and isinstance(mixer, NemotronHMoE):
            monkeypatch.setattr(mixer, "correction_bias", torch.nn.Parameter(torch.zeros_like(mixer.correction_bias)))


@pytest.mark.parametrize("arch, what", [("bamba", "half-head rotary"), ("nemotron_h", "expert choice bias"),
                                        ("nemotron_h_dense", "attention without rotary"),
                                        ("falcon_h1", "norm before the gate"), ("falcon_h1", "key multiplier")])
def test_the_oracle_notices_each_feature_left_out(tiny_model, arch, what, monkeypatch):
    _, path, hf, ids = family_case(arch, tiny_model(arch), 24)
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=what == "key multiplier")   # its dense weights, not the packed ones
    _leave_out(what, paged.model, monkeypatch)
    out = torch.cat([paged.step([(0, ids[:9])]), paged.step([(0, ids[9:])])])
    with pytest.raises(AssertionError):
        assert_close(out, ref, what)


def test_tensor_parallelism_is_refused(tiny_model):
    with pytest.raises(ValueError, match="tensor parallelism is not supported"):
        Paged(tiny_model("nemotron_h_dense")).model.enable_tensor_parallel(None)


def _nemotron_h(**changes):
    from transformers import NemotronHConfig

    fields = dict(layers_block_type=["linear_attention", "full_attention", "mlp"], hidden_size=64,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, mamba_num_heads=8, mamba_head_dim=16,
                  n_groups=2, ssm_state_size=8, architectures=["NemotronHForCausalLM"])
    config = NemotronHConfig(**fields)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [
    ({"mlp_hidden_act": "gelu"}, "mlp_hidden_act"), ({"mamba_hidden_act": "relu"}, "mamba_hidden_act"),
    ({"mlp_bias": True}, "mlp_bias"), ({"n_groups": 3}, "n_groups"), ({"conv_kernel": 1}, "conv_kernel"),
    ({"layers_block_type": ["linear_attention", "cross_attention", "mlp"]}, "layers_block_type")])
def test_what_nemotron_h_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_nemotron_h(**changes))


def test_what_falcon_h1_cannot_run_is_refused():
    from transformers import FalconH1Config

    config = FalconH1Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            mamba_d_ssm=96, mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8,
                            architectures=["FalconH1ForCausalLM"])
    config.ssm_multipliers = [1.0, 1.0]
    with pytest.raises(ValueError, match="ssm_multipliers"):
        ModelConfig.from_hf(config)
