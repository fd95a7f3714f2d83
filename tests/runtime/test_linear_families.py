"""The linear-attention hybrids (tiny models: tests/tiny_linear_models.py) against HF transformers on the same tiny
random weights (logits_oracle.py): LaraMini (lara_mini.py), MiniMax (minimax_text.py), Kimi Linear and Ling 3
(kimi_linear.py, kda_rule.py), Qwen4-Exp (qwen4_exp.py, qwen4_exp_config.py), all read by linear_hybrid_config.py.

Prefills alone and batched, an extend on a row's earlier prefill, chunked prefills, decodes in pairs and a decode
beside a prefill, each row's delta-net state carried between steps; test_each_difference_matters proves the oracle
notices each family's own features left out; their config fields and what they cannot run refused; served end to end
as HF generates greedily, with a shared system prompt and a second turn started from the radix cache's state
snapshots; the Kimi delta rule's chunks against its token-by-token steps.
"""

import pytest
import test_state_snapshots
import torch
from paged_checks import (
    FamilyCases,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import TINY_LINEAR_ARCHS

from radixlm.runtime.models import kda_rule, kimi_linear, loader, minimax_text, qwen4_exp
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.kimi_linear import KimiLatentAttention, KimiLinearForCausalLM
from radixlm.runtime.models.lara_mini import LaraMiniLayer
from radixlm.runtime.models.layer_ops import Rotary
from radixlm.runtime.models.layers import gemma_rms_norm
from radixlm.runtime.models.linear_hybrid_config import KimiDelta, LightningAttention
from radixlm.runtime.models.mla import MLAAttention

LENGTH = 24   # prompt tokens: past the window of 6 and the delta rule's first chunks
_CONFIG_CLASSES = {"lara_mini": "LaraMiniConfig", "minimax": "MiniMaxConfig", "kimi_linear": "KimiLinearConfig",
                   "bailing_hybrid": "BailingHybridConfig", "qwen4_exp": "Qwen4ExpTextConfig"}
_case = FamilyCases(_CONFIG_CLASSES, LENGTH)   # one HF oracle per model for the whole file


@pytest.fixture(scope="module", params=TINY_LINEAR_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefills_extends_chunks_and_decodes(fam):
    check_prefill_single_and_batch(fam)
    check_extend_on_a_cached_prefix(fam, 9)
    check_chunked_prefill(fam, 5)


def test_decodes_in_pairs_and_beside_a_prefill(fam):
    check_decode_pair(fam, 12, 15)
    check_mixed_step(fam, 14, 9)


# (arch, what is left out, how: "json" config.json keys, "fields" ModelConfig fields or "attr" a monkeypatch, value)
DIFFERENCES = [
    ("lara_mini", "the window", "fields", {"layer_windows": ()}),
    ("lara_mini", "the full layers without rotary", "fields", {"nope_layers": ()}),
    ("lara_mini", "norms by weight, not 1 + weight", "attr", (LaraMiniLayer, "norm", staticmethod(gemma_rms_norm))),
    ("lara_mini", "the renormalised top-k weights", "json", {"norm_topk_prob": False}),
    ("minimax", "the window", "fields", {"layer_windows": ()}),
    ("minimax", "the alpha and beta factors", "fields", {"lightning": LightningAttention((1, 3), 4, *[(1.0, 1.0)] * 3)}),
    ("minimax", "the slopes' layer factor", "attr",
     (minimax_text, "slopes", lambda layer, layers, heads: _slopes(0, layers, heads))),
    ("kimi_linear", "the decay per key channel", "attr",
     (kimi_linear, "chunked", lambda q, k, v, g, beta, state: _chunked(q, k, v, g.mean(-1, keepdim=True).expand_as(g),
                                                                       beta, state))),
    ("kimi_linear", "latent attention without rotary", "attr",
     (KimiLinearForCausalLM, "layer_rotaries", lambda self, positions: [Rotary(positions, self.cos_sin)] * 4)),
    ("bailing_hybrid", "the safe forget gate", "fields",
     {"kimi_delta": KimiDelta((0, 1), 4, 8, 4, low_rank_gates=False, attention_gate=True)}),
    ("bailing_hybrid", "the latent attention's gate per head", "attr",
     (KimiLatentAttention, "queries", lambda self, q_a: (MLAAttention.queries(self, q_a)[0], None))),
    ("qwen4_exp", "the streams' injection weights", "attr",
     (qwen4_exp.HyperConnection, "around", lambda self, x, sublayer: x + sublayer(self.mix(x)[0]).repeat(1, 2))),
    ("qwen4_exp", "rotary over a quarter of each head", "fields", {"rotary_dim": None}),
]
_slopes, _chunked = minimax_text.slopes, kda_rule.chunked


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, tiny_model, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    check_difference_left_out((path, ids, hf(ids)), left_out, how, change, tmp_path, monkeypatch)


def test_lara_mini_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("lara_mini", tiny_model))
    la = c.linear_attention
    assert (la.linear_layers, la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim, la.conv_kernel) == (
        (0, 2), 4, 8, 16, 8, 4)
    assert c.layer_windows == (None, 6, None, None, 6) and c.nope_layers == (3,) and c.kv_layers == 3
    assert c.qk_norm and c.tie_word_embeddings and c.recurrent_layers == (0, 2)
    m = c.moe
    assert (m.num_experts, m.top_k, m.intermediate_size, m.norm_topk_prob, m.sparse_layers) == (8, 2, 24, True,
                                                                                               (0, 1, 2, 3, 4))
    assert m.shared_expert_intermediate_size == 48 and not m.shared_expert_gate and m.router_float32


def test_minimax_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("minimax", tiny_model))
    assert c.lightning == LightningAttention((1, 3), 4, (0.8, 1.3), (1.5, 0.7), (1.2, 0.6))
    assert c.layer_windows == (6, None, 6, None) and c.kv_layers == 2 and c.recurrent_layers == (1, 3)
    m = c.moe
    assert (m.num_experts, m.top_k, m.intermediate_size, m.norm_topk_prob, m.shared_expert_intermediate_size) == (
        8, 2, 32, True, 0)


def test_what_minimax_cannot_run_is_refused():
    pytest.importorskip("transformers.models.minimax")
    from transformers import MiniMaxConfig

    config = MiniMaxConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=32, architectures=["MiniMaxForCausalLM"])
    config.layer_types = ["linear_attention", "sliding_attention"]
    with pytest.raises(ValueError, match="layer_types"):
        ModelConfig.from_hf(config)


def test_kimi_linear_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("kimi_linear", tiny_model))
    kd, m, moe = c.kimi_delta, c.mla, c.moe
    assert (kd.linear_layers, kd.num_heads, kd.head_dim, kd.conv_kernel, c.kv_layers) == ((0, 2, 3), 4, 16, 4, 1)
    assert (m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.rope_interleave) == (
        16, 16, 8, 16, False)
    assert c.head_dim == 24 and c.num_kv_heads == 1 and c.sm_scale == 24 ** -0.5
    assert (moe.sparse_layers, moe.scoring, moe.correction_bias, moe.n_group, moe.topk_group) == (
        (1, 2, 3), "sigmoid", True, 2, 1)
    assert moe.routed_scaling_factor == 2.5 and moe.shared_expert_intermediate_size == 32 and moe.norm_topk_prob


def test_ling_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("bailing_hybrid", tiny_model))
    assert c.kimi_delta == KimiDelta((0, 1), 4, 8, 4, low_rank_gates=False, gate_lower_bound=-5.0, attention_gate=True)
    assert c.mla.rope_interleave and c.rotary_dim == 8 and c.nope_layers == () and c.kv_layers == 1
    assert c.moe.sparse_layers == (1, 2) and c.moe.n_group == 2 and c.moe.routed_scaling_factor == 2.5


def test_qwen4_exp_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("qwen4_exp", tiny_model))
    assert (c.hyper.streams, c.hyper.rank, c.context_length, c.rotary_dim, c.kv_layers) == (2, 8, 128, 8, 1)
    assert c.linear_attention.linear_layers == (0, 1, 3) and c.qk_norm
    assert c.moe.shared_expert_gate and c.moe.shared_expert_intermediate_size == 48 and c.moe.sparse_layers == (
        0, 1, 2, 3)


def test_what_qwen4_exp_cannot_run_is_refused():
    pytest.importorskip("transformers.models.qwen4_exp")
    from transformers import Qwen4ExpTextConfig

    config = Qwen4ExpTextConfig(hidden_size=64, num_hidden_layers=2, head_dim=32, num_attention_heads=4,
                                layer_types=["linear_attention", "linear_attention"], ple_layer_ids=[1],
                                ple_embed_dim=64, eos_token_id=1)
    config.architectures = ["Qwen4ExpForCausalLM"]
    with pytest.raises(ValueError, match="ple_layer_ids"):
        ModelConfig.from_hf(config)


def test_the_chunked_kimi_delta_rule_equals_its_steps():
    gen = torch.Generator().manual_seed(0)
    T, H, D = 40, 2, 8   # more than two chunks
    q, k = (torch.nn.functional.normalize(torch.randn(T, H, D, generator=gen, dtype=torch.float64), dim=-1)
            for _ in range(2))
    v = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    g = -torch.rand(T, H, D, generator=gen, dtype=torch.float64)
    beta = torch.rand(T, H, generator=gen, dtype=torch.float64)
    start = torch.randn(H, D, D, generator=gen, dtype=torch.float64)
    state, steps = start.clone(), start.clone()[None]
    out = kda_rule.chunked(q, k, v, g, beta, state)
    want = torch.stack([kda_rule.recurrent_step(q[t:t + 1], k[t:t + 1], v[t:t + 1], g[t:t + 1], beta[t:t + 1],
                                                steps)[0] for t in range(T)])
    assert torch.allclose(out, want, atol=1e-10) and torch.allclose(state, steps[0], atol=1e-10)


def test_what_kimi_linear_cannot_run_is_refused():
    pytest.importorskip("transformers.models.kimi_linear")
    from transformers import KimiLinearConfig

    config = KimiLinearConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                              linear_num_heads=4, linear_head_dim=16, num_local_experts=8, vocab_size=300,
                              pad_token_id=0, bos_token_id=None, eos_token_id=1,
                              architectures=["KimiLinearForCausalLM"])
    config.mlp_layer_types = ["dense", "moe"]
    with pytest.raises(ValueError, match="mlp_layer_types"):
        ModelConfig.from_hf(config)


def test_what_ling_cannot_run_is_refused():
    pytest.importorskip("transformers.models.bailing_hybrid")
    from transformers import BailingHybridConfig

    config = BailingHybridConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                 kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, head_dim=8,
                                 num_local_experts=8, vocab_size=300, pad_token_id=0, eos_token_id=1,
                                 expert_swiglu_limit_list=[0, 7.0], architectures=["BailingHybridForCausalLM"])
    with pytest.raises(ValueError, match="swiglu_limits"):
        ModelConfig.from_hf(config)


def _lara_mini(**changes):
    pytest.importorskip("transformers.models.lara_mini")
    from transformers import LaraMiniConfig

    config = LaraMiniConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
                            num_experts_per_tok=2, layer_types=["linear_attention", "sliding_attention"],
                            architectures=["LaraMiniForCausalLM"])
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@pytest.mark.parametrize("changes, field", [({"attention_bias": True}, "attention_bias"),
                                            ({"hidden_act": "gelu"}, "activation"),
                                            ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
                                            ({"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim"),
                                            ({"sliding_window": 0}, "sliding_window"),
                                            ({"layer_types": ["linear_attention", "mamba"]}, "layer_types")])
def test_what_lara_mini_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_lara_mini(**changes))


@pytest.mark.parametrize("arch", TINY_LINEAR_ARCHS)
def test_served_greedily_as_hf_generates(tiny_model, arch):
    _case.path(arch, tiny_model)
    assert_greedy_serving_matches_hf(tiny_model(arch))


@pytest.mark.parametrize("arch", TINY_LINEAR_ARCHS)
def test_a_system_prompt_and_a_second_turn_start_from_state_snapshots(tiny_model, arch):
    _case.path(arch, tiny_model)
    test_state_snapshots.test_hybrids_reuse_a_system_prompt_and_a_first_turn_as_hf_generates(tiny_model, arch)
