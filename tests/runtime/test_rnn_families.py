"""The "rnn" group's recurrent models against HF: Zamba (zamba.py), RecurrentGemma (recurrent_gemma.py), RWKV-4
(rwkv.py), xLSTM (xlstm.py).  Logits of batched and chunked prefills, decodes
and a mixed step over each request row's state; the oracle noticing each feature that sets the family apart, left
out; their config fields and what they cannot run refused; served greedily as HF generates, a shared system prompt and a
second turn from the radix cache's state snapshots.
"""

import dataclasses

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import FamilyCases, check_difference_left_out
from recurrent_checks import assert_snapshots_serve_as_hf_generates, check_prefills_chunks_decodes_and_a_mixed_step
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_RNN_ARCHS

from radixlm.runtime.models import loader
from radixlm.runtime.models.config import ModelConfig

CASES = FamilyCases({"zamba": "ZambaConfig", "recurrent_gemma": "RecurrentGemmaConfig", "rwkv": "RwkvConfig",
                     "xlstm": "xLSTMConfig"}, 24)


@pytest.mark.parametrize("arch", TINY_RNN_ARCHS)
def test_logits_of_prefills_chunks_decodes_and_a_mixed_step(tiny_model, arch):
    """Rows 0 and 1 prefilled together, continued by a chunk each, decoded together, then row 1's decode beside a
    fresh prefill of row 2: every logit against HF's one run of the prompt."""
    _, path, hf, ids = CASES(arch, tiny_model)
    check_prefills_chunks_decodes_and_a_mixed_step(path, ids, hf(ids))


def _leave_out(what, model, monkeypatch):
    if model.config.rwkv is not None:
        return _leave_out_in_rwkv(what, model, monkeypatch)
    if what == "scores scaled by (D / 2) ** -0.5":   # head_dim ** -0.5 instead
        monkeypatch.setattr(model.attn_backend, "sm_scale", model.config.head_dim ** -0.5)
    elif what == "the shared block's GELU MLP":
        for block in model.blocks:
            sb = block.c.shared_blocks
            monkeypatch.setattr(block, "c", dataclasses.replace(block.c, shared_blocks=dataclasses.replace(
                sb, mlp_act="silu")))
    for layer in model.layers:
        mixer = layer.mamba
        if what == "x and the gate interleaved":
            D = mixer.m.intermediate
            order = torch.cat([torch.arange(D) * 2, torch.arange(D) * 2 + 1])   # x | z read as the halves
            monkeypatch.setattr(mixer.in_proj, "data", mixer.in_proj.data[order])
            monkeypatch.setattr(mixer.in_bias, "data", mixer.in_bias.data[order])
        elif what == "each head its own x_proj":
            monkeypatch.setattr(mixer.x_proj, "data", mixer.x_proj.data[:1].expand_as(mixer.x_proj))


def _leave_out_in_rwkv(what, model, monkeypatch):
    if what == "the stream halved every rescale_every layers":   # the output weights kept as they were trained
        monkeypatch.setattr(model, "config", dataclasses.replace(model.config, rwkv=dataclasses.replace(
            model.config.rwkv, rescale_every=0)))
    for i, layer in enumerate(model.layers):
        if what == "the token shift":   # each token mixed with itself
            monkeypatch.setattr(layer.previous, "data", torch.tensor([0.0, 1.0]).expand_as(layer.previous))
        elif what == "the current token's bonus time_first":
            monkeypatch.setattr(layer.time_first, "data", torch.zeros_like(layer.time_first))
        elif what == "the stream halved every rescale_every layers":
            for w in (layer.att_output, layer.ffn_value):
                monkeypatch.setattr(w, "data", w.data * 2 ** (i // 2))


@pytest.mark.parametrize("arch, what", [("zamba", "x and the gate interleaved"), ("zamba", "each head its own x_proj"),
                                        ("zamba", "scores scaled by (D / 2) ** -0.5"),
                                        ("zamba", "the shared block's GELU MLP"), ("rwkv", "the token shift"),
                                        ("rwkv", "the current token's bonus time_first"),
                                        ("rwkv", "the stream halved every rescale_every layers")])
def test_each_difference_matters(tiny_model, arch, what, monkeypatch):
    _, path, hf, ids = CASES(arch, tiny_model)
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True)   # weights as loaded, not packed
    _leave_out(what, paged.model, monkeypatch)
    out = torch.cat([paged.step([(0, ids[:9])]), paged.step([(0, ids[9:])])])
    with pytest.raises(AssertionError):
        assert_close(out, ref, what)


@pytest.mark.parametrize("left_out, change", [
    ("the logits' soft cap", {"final_softcap": None}),
    ("sqrt(H) rounded to bfloat16", {"embedding_multiplier": 48 ** 0.5}),
    ("the local attention's window", {"layer_windows": (), "sliding_window": None}),
    ("half of each head rotated", {"rotary_dim": None}),
    ("the RG-LRU's reset at position 0", None)])
def test_each_difference_of_recurrent_gemma_matters(tiny_model, left_out, change, tmp_path, monkeypatch):
    from radixlm.runtime.models.recurrent_gemma import GriffinRecurrentBlock

    _, path, hf, ids = CASES("recurrent_gemma", tiny_model)
    how = "fields" if change is not None else "setattr"
    if change is None:   # sqrt(1 - a^2) applied to the first token too
        change = (GriffinRecurrentBlock, "first_tokens", staticmethod(lambda fb: (fb.positions < 0)[:, None]))
    check_difference_left_out((path, ids, hf(ids)), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("left_out", ["the gates' soft cap", "the logits' soft cap"])
def test_each_difference_of_xlstm_matters(tiny_model, left_out, tmp_path, monkeypatch):
    _, path, hf, ids = CASES("xlstm", tiny_model)
    c = loader.read_model_config(path)
    change = ({"xlstm": dataclasses.replace(c.xlstm, gate_soft_cap=0.0)} if left_out == "the gates' soft cap"
              else {"final_softcap": None})
    check_difference_left_out((path, ids, hf(ids)), left_out, "fields", change, tmp_path, monkeypatch)


def test_config_fields(tiny_model):
    z = loader.read_model_config(CASES.path("zamba", tiny_model))
    m, sb = z.mamba1, z.shared_blocks
    assert (m.intermediate, m.heads, m.d_state, m.dt_rank, m.conv_kernel, m.proj_bias) == (128, 2, 8, 6, 4, True)
    assert (sb.hybrid_layers, sb.num_blocks, sb.adapter_rank, sb.mlp_act) == ((2, 4), 1, 0, "gelu")
    assert (z.kv_layers, z.num_kv_heads, z.head_dim, z.recurrent_layers) == (2, 2, 32, (0, 1, 2, 3, 4))
    assert z.sm_scale == 16 ** -0.5 and z.nope_layers == (0, 1, 2, 3, 4) and z.tie_word_embeddings
    g = loader.read_model_config(CASES.path("recurrent_gemma", tiny_model))
    assert g.griffin.recurrent_layers == (0, 1, 3) and (g.griffin.lru_width, g.griffin.lru_heads) == (64, 4)
    assert (g.kv_layers, g.num_kv_heads, g.head_dim, g.rotary_dim, g.layer_windows) == (1, 1, 12, 6, (6,))
    assert (g.intermediate_size, g.final_softcap, g.embedding_multiplier) == (48, 3.0, 6.9375)
    r = loader.read_model_config(CASES.path("rwkv", tiny_model))
    assert (r.rwkv.recurrent_layers, r.rwkv.attention_width, r.rwkv.rescale_every) == ((0, 1, 2, 3), 32, 2)
    assert r.kv_layers == 0 and r.intermediate_size == 64 and not r.tie_word_embeddings
    x = loader.read_model_config(CASES.path("xlstm", tiny_model))
    assert (x.xlstm.heads, x.xlstm.qk_dim, x.xlstm.v_dim, x.xlstm.gate_soft_cap, x.xlstm.use_bias) == (
        4, 64, 128, 3.0, True)
    assert (x.kv_layers, x.recurrent_layers, x.intermediate_size, x.final_softcap) == (0, (0, 1, 2), 192, 5.0)


def _zamba(**changes):
    pytest.importorskip("transformers.models.zamba")
    from transformers import ZambaConfig

    config = ZambaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_mamba_heads=2,
                         mamba_d_state=8, layers_block_type=["mamba", "hybrid"],
                         architectures=["ZambaForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [({"hidden_act": "relu"}, "hidden_act"),
                                            ({"hidden_mamba_act": "gelu"}, "hidden_mamba_act"),
                                            ({"attention_hidden_size": 96}, "attention_hidden_size"),
                                            ({"mamba_d_conv": 1}, "mamba_d_conv"),
                                            ({"layers_block_type": ["mamba", "moe"]}, "layers_block_type")])
def test_what_zamba_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_zamba(**changes))


@pytest.mark.parametrize("arch", TINY_RNN_ARCHS)
def test_served_greedily_as_hf_generates(tiny_model, arch):
    assert_greedy_serving_matches_hf(CASES.path(arch, tiny_model))


@pytest.mark.parametrize("arch", TINY_RNN_ARCHS)
def test_a_system_prompt_and_a_second_turn_from_the_state_snapshots(tiny_model, arch):
    """A second user of a system prompt computes it and keeps its state there, a third starts from it, and a second
    turn starts where the first turn ended, each with HF's greedy tokens; plain decodes in flight (overlap)."""
    assert_snapshots_serve_as_hf_generates(CASES.path(arch, tiny_model), overlap_schedule=True)


def _recurrent_gemma(**changes):
    pytest.importorskip("transformers.models.recurrent_gemma")
    from transformers import RecurrentGemmaConfig

    config = RecurrentGemmaConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, lru_width=64,
                                  architectures=["RecurrentGemmaForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [({"hidden_activation": "relu"}, "hidden_activation"),
                                            ({"lru_width": 66}, "lru_width"),
                                            ({"conv1d_width": 1}, "conv1d_width"),
                                            ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
                                             "rope_type")])
def test_what_recurrent_gemma_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_recurrent_gemma(**changes))


def test_what_rwkv_cannot_run_is_refused():
    pytest.importorskip("transformers.models.rwkv")
    from transformers import RwkvConfig

    config = RwkvConfig(hidden_size=32, num_hidden_layers=2, attention_hidden_size=48,
                        architectures=["RwkvForCausalLM"])
    with pytest.raises(ValueError, match="attention_hidden_size"):
        ModelConfig.from_hf(config)


@pytest.mark.parametrize("changes, field", [({"weight_mode": "fused"}, "weight_mode"), ({"mode": "train"}, "mode"),
                                            ({"qk_dim_factor": 0.25}, "multiples of 64"),
                                            ({"inference_state_dtype": "bfloat16"}, "inference_state_dtype")])
def test_what_xlstm_cannot_run_is_refused(changes, field):
    pytest.importorskip("transformers.models.xlstm")
    from transformers import xLSTMConfig

    config = xLSTMConfig(hidden_size=128, num_hidden_layers=2, num_heads=4, architectures=["xLSTMForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(config)
