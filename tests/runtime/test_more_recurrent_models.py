"""More recurrent models against HF: the attention-free Mamba-2, Mamba and Falcon Mamba stacks
(mamba_stack.py), OLMo Hybrid (olmo_hybrid.py), Jamba (jamba.py) and Zamba2 (zamba2.py).  Logits of batched and
chunked prefills, decodes and a mixed step over each request row's state; the chunked selective scan against its
token-by-token form; the oracle noticing Falcon Mamba's dt/B/C norms, Mamba-2's dt limit, the carried convolution
inputs, OLMo Hybrid's beta up to 2, Jamba's weighted norms, attention without rotary and unrenormalised experts, and
Zamba2's adapters, its shared blocks' rotary and their score scale, each left out; their config fields (the Mamba
stacks with no KV layer at all) and what they cannot run refused; and a pure recurrent model served greedily as HF
generates.
"""

import dataclasses

import pytest
import torch
from hybrid_models import forget_convolution_inputs
from logits_oracle import Paged, assert_close, family_case
from recurrent_checks import check_prefills_chunks_decodes_and_a_mixed_step
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_R2_ARCHS

from radixlm.runtime.models import loader, selective_scan_rule
from radixlm.runtime.models.config import ModelConfig

pytest.importorskip("transformers.models.falcon_mamba")
pytest.importorskip("transformers.models.mamba2")


_REFS = {}   # arch -> (path, ids, HF's logits of ids): one oracle run per arch for every test here


def _case(tiny_model, arch):
    pytest.importorskip(f"transformers.models.{arch}")   # each tiny arch is named as its transformers module
    if arch not in _REFS:
        _, path, hf, ids = family_case(arch, tiny_model(arch), 24)
        _REFS[arch] = path, ids, hf(ids)
    return _REFS[arch]


@pytest.mark.parametrize("arch", TINY_R2_ARCHS)
def test_logits_of_prefills_chunks_decodes_and_a_mixed_step(tiny_model, arch):
    """Rows 0 and 1 prefilled together, continued by a chunk each, decoded together, then row 1's decode beside a
    fresh prefill of row 2: every logit against HF's one run of the prompt."""
    check_prefills_chunks_decodes_and_a_mixed_step(*_case(tiny_model, arch))


def test_chunked_selective_scan_equals_the_token_by_token_scan():
    gen = torch.Generator().manual_seed(0)
    T, D, N = 150, 6, 5   # more than two chunks
    x, B, C = (torch.randn(n, m, generator=gen, dtype=torch.float64) for n, m in ((T, D), (T, N), (T, N)))
    dt = torch.rand(T, D, generator=gen, dtype=torch.float64)
    A = -torch.rand(D, N, generator=gen, dtype=torch.float64)
    start = torch.randn(D, N, generator=gen, dtype=torch.float64)
    state, steps = start.clone(), start.clone()[None]
    out = selective_scan_rule.chunked(x, dt, A, B, C, state)
    want = torch.stack([selective_scan_rule.recurrent_step(x[t:t + 1], dt[t:t + 1], A, B[t:t + 1], C[t:t + 1],
                                                           steps)[0] for t in range(T)])
    assert torch.allclose(out, want, atol=1e-10) and torch.allclose(state, steps[0], atol=1e-10)


def _leave_out(what, model, monkeypatch):
    if what == "beta up to 2":
        return _leave_out_in_olmo_hybrid(what, model, monkeypatch)
    if what in ("adapters", "shared blocks' rotary", "scores scaled by (D / 2) ** -0.5"):
        return _leave_out_in_zamba2(what, model, monkeypatch)
    if what in ("weighted dt, B and C norms", "attention without rotary", "experts never renormalised"):
        return _leave_out_in_jamba(what, model, monkeypatch)
    for layer in model.layers:
        mixer = layer.mixer
        if what == "dt, B and C norms":
            monkeypatch.setattr(mixer, "m", dataclasses.replace(mixer.m, bc_dt_norm_eps=None))
        elif what == "dt limit":
            monkeypatch.setattr(mixer, "m", dataclasses.replace(mixer.m, dt_min=0.0, dt_max=float("inf")))


def _leave_out_in_jamba(what, model, monkeypatch):
    from radixlm.runtime.models.llama import LlamaAttention
    from radixlm.runtime.models.mamba1 import MambaMixer
    from radixlm.runtime.models.moe import SparseMoeBlock

    for layer in model.layers:
        mixer, mlp = layer.mixer, layer.mlp
        if what == "weighted dt, B and C norms" and isinstance(mixer, MambaMixer):
            monkeypatch.setattr(mixer, "m", dataclasses.replace(mixer.m, bc_dt_norm_weighted=False))
        elif what == "attention without rotary" and isinstance(mixer, LlamaAttention):
            monkeypatch.setattr(mixer, "rope", True)
        elif what == "experts never renormalised" and isinstance(mlp, SparseMoeBlock):
            monkeypatch.setattr(mlp, "moe", dataclasses.replace(mlp.moe, norm_topk_prob=True))


def _leave_out_in_zamba2(what, model, monkeypatch):
    if what == "scores scaled by (D / 2) ** -0.5":   # head_dim ** -0.5 instead
        monkeypatch.setattr(model.attn_backend, "sm_scale", model.config.head_dim ** -0.5)
    for block in model.blocks:
        c = block.c
        if what == "adapters":
            monkeypatch.setattr(block, "c", dataclasses.replace(c, shared_blocks=dataclasses.replace(
                c.shared_blocks, adapter_rank=0)))
        elif what == "shared blocks' rotary":
            monkeypatch.setattr(block, "c", dataclasses.replace(c, nope_layers=tuple(range(c.num_layers))))


def _leave_out_in_olmo_hybrid(what, model, monkeypatch):
    from radixlm.runtime.models.olmo_hybrid import OlmoHybridLinearLayer

    for layer in model.layers:
        if what == "beta up to 2" and isinstance(layer, OlmoHybridLinearLayer):
            net = layer.linear_attn
            monkeypatch.setattr(net, "la", dataclasses.replace(net.la, beta_scale=1.0))


@pytest.mark.parametrize("arch, what", [("falcon_mamba", "dt, B and C norms"), ("mamba2", "dt limit"),
                                        ("mamba", "carried convolution inputs"), ("olmo_hybrid", "beta up to 2"),
                                        ("jamba", "weighted dt, B and C norms"), ("jamba", "attention without rotary"),
                                        ("jamba", "experts never renormalised"), ("zamba2", "adapters"),
                                        ("zamba2", "shared blocks' rotary"),
                                        ("zamba2", "scores scaled by (D / 2) ** -0.5")])
def test_the_oracle_notices_each_feature_left_out(tiny_model, arch, what, monkeypatch):
    path, ids, ref = _case(tiny_model, arch)
    paged = Paged(path, seed=6)
    if what == "carried convolution inputs":
        forget_convolution_inputs(monkeypatch)
    _leave_out(what, paged.model, monkeypatch)
    out = torch.cat([paged.step([(0, ids[:9])]), paged.step([(0, ids[9:])])])
    with pytest.raises(AssertionError):
        assert_close(out, ref, what)


def test_config_fields_and_no_kv_layer(tiny_model):
    for arch in TINY_R2_ARCHS:
        pytest.importorskip(f"transformers.models.{arch}")
    from radixlm.runtime.runner.model_setup import MAX_DEFAULT_TOKENS, kv_budget

    m2 = loader.read_model_config(tiny_model("mamba2"))
    m = m2.mamba2
    assert (m.mamba_layers, m.num_heads, m.head_dim, m.n_groups, m.d_state, m.conv_kernel, m.dt_min, m.dt_max) == (
        (0, 1, 2), 8, 16, 2, 8, 4, 0.05, 1.5)
    assert m2.kv_layers == 0 and m2.recurrent_layers == (0, 1, 2) and m2.residual_in_fp32 and m.proj_bias
    m1 = loader.read_model_config(tiny_model("mamba")).mamba1
    assert (m1.intermediate, m1.d_state, m1.dt_rank, m1.proj_bias, m1.bc_dt_norm_eps) == (128, 8, 6, True, None)
    f = loader.read_model_config(tiny_model("falcon_mamba"))
    assert f.kv_layers == 0 and f.mamba1.bc_dt_norm_eps == 1e-5 and f.tie_word_embeddings
    j = loader.read_model_config(tiny_model("jamba"))
    assert (j.mamba1.mamba_layers, j.kv_layers, j.moe.sparse_layers, j.moe.norm_topk_prob, j.nope_layers) == (
        (0, 1, 3), 1, (1, 3), False, (0, 1, 2, 3))
    assert j.mamba1.bc_dt_norm_weighted and j.mamba1.bc_dt_norm_eps == 1e-5 and j.mamba1.dt_rank == 6
    o = loader.read_model_config(tiny_model("olmo_hybrid"))
    la = o.linear_attention
    assert (la.linear_layers, la.beta_scale, la.norm_eps, o.kv_layers, o.nope_layers, o.rms_norm_eps) == (
        (0, 2, 3), 2.0, 1e-5, 1, (), 1e-6)
    z = loader.read_model_config(tiny_model("zamba2"))
    sb = z.shared_blocks
    assert (sb.hybrid_layers, sb.num_blocks, sb.adapter_rank, sb.mlp_act, z.kv_layers, z.head_dim) == (
        (1, 3, 4), 2, 4, "gelu", 3, 32)
    assert z.sm_scale == 16 ** -0.5 and z.mamba2.dt_min == 0.05 and z.recurrent_layers == (0, 1, 2, 3, 4)
    # no layer keeps KV: the token budget does not come from the memory per token
    assert kv_budget(f, torch.float32, None, 0.5, "cpu", free_bytes=1 << 30) == MAX_DEFAULT_TOKENS


def _mamba2(**changes):
    from transformers import Mamba2Config

    config = Mamba2Config(hidden_size=64, num_heads=8, head_dim=16, n_groups=2, state_size=8, num_hidden_layers=2,
                          architectures=["Mamba2ForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [({"n_groups": 3}, "n_groups"), ({"conv_kernel": 1}, "conv_kernel"),
                                            ({"hidden_act": "gelu"}, "activation"), ({"expand": 4}, "mamba_expand")])
def test_what_mamba2_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_mamba2(**changes))


def _olmo_hybrid(**changes):
    pytest.importorskip("transformers.models.olmo_hybrid")
    from transformers import OlmoHybridConfig

    config = OlmoHybridConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, linear_num_key_heads=4,
                              linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"],
                              architectures=["OlmoHybridForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


def test_olmo_hybrid_without_a_rope_theta_attends_without_rotary():
    config = ModelConfig.from_hf(_olmo_hybrid(rope_parameters={"rope_type": "default", "rope_theta": None}))
    assert config.nope_layers == (0, 1)


@pytest.mark.parametrize("changes, field", [({"linear_num_value_heads": 8}, "linear_num_value_heads"),
                                            ({"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim"),
                                            ({"layer_types": ["linear_attention", "mamba"]}, "layer_types")])
def test_what_olmo_hybrid_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_olmo_hybrid(**changes))


def _zamba2(**changes):
    pytest.importorskip("transformers.models.zamba2")
    from transformers import Zamba2Config

    config = Zamba2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, n_mamba_heads=8,
                          mamba_ngroups=2, mamba_d_state=8, layers_block_type=["mamba", "hybrid"],
                          use_shared_attention_adapter=True, architectures=["Zamba2ForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [({"add_bias_linear": True}, "add_bias_linear"),
                                            ({"use_long_context": True}, "use_long_context"),
                                            ({"hidden_act": "relu"}, "hidden_act"),
                                            ({"num_key_value_heads": 2}, "num_key_value_heads"),
                                            ({"layers_block_type": ["mamba", "moe"]}, "layers_block_type")])
def test_what_zamba2_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_zamba2(**changes))


def test_served_greedily_as_hf_generates(tiny_model):
    assert_greedy_serving_matches_hf(tiny_model("falcon_mamba"))
