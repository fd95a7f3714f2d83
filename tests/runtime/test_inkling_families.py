"""The "inkling" group against HF transformers on the same tiny random weights (tests/tiny_inkling_models.py, read by
logits_oracle.py): Inkling (inkling.py, inkling_attention.py, inkling_config.py).

Prefills alone and batched, an extend on a row's earlier prefill, chunked prefills, decodes in pairs and a decode
beside a prefill, each row's short-convolution inputs carried between steps; test_each_difference_matters proves the
oracle notices each of the family's own features left out; its config fields and what it cannot run refused; served
end to end as HF generates greedily, with a shared system prompt and a second turn started from the radix cache's
state snapshots.
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from paged_checks import (
    FamilyCases,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
)
from recurrent_checks import assert_snapshots_serve_as_hf_generates
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_models import TINY_INKLING_ARCHS

from radixlm.runtime.models import inkling, inkling2, inkling2_attention, inkling2_loop, inkling_attention, loader
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.layer_ops import silu_mul
from radixlm.runtime.models.loader import load_tokenizer

LENGTH = 24   # prompt tokens: past the window of 5, the bias extent of 7 and the log scaling's floor of 4
_case = FamilyCases({"inkling": "InklingTextConfig", "inkling2": "Inkling2TextConfig",
                      "inkling2_loop": "Inkling2LoopTextConfig"}, LENGTH)   # one HF oracle per model for the whole file


@pytest.fixture(scope="module", params=TINY_INKLING_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefills_extends_chunks_and_decodes(fam):
    check_prefill_single_and_batch(fam)
    check_extend_on_a_cached_prefix(fam, 9)
    check_chunked_prefill(fam, 5)


def test_decodes_in_pairs_and_beside_a_prefill(fam):
    check_decode_pair(fam, 12, 15)
    check_mixed_step(fam, 14, 9)


def _config(**changes):
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    fields = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8,
                  sliding_window_size=5, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                  pad_token_id=0, architectures=["InklingForCausalLM"])
    config = InklingTextConfig(**fields)
    for name, value in changes.items():   # after HF's own checks
        setattr(config, name, value)
    return config


def _shared_weights_apart(picked):   # the routed experts' softmax alone, the shared ones by their own sigmoid
    k = picked.shape[1] - 2
    return torch.cat([torch.softmax(F.logsigmoid(picked[:, :k]), dim=-1), picked[:, k:].sigmoid()], dim=-1)


def _identity_conv(states, index, x, weight):
    return x


def _with_layout(path, **changes):
    c = loader.read_model_config(path)
    return {"inkling": dataclasses.replace(c.inkling, **changes)}


# (what is left out, how: "fields" ModelConfig fields or "attr" a monkeypatch, value (a callable of the model's path))
DIFFERENCES = [
    ("the learned distance bias", "attr",
     (inkling_attention, "distance_bias", lambda r, profiles, distance: torch.zeros(()))),
    ("the sliding window", "attr", (inkling_attention, "out_of_reach", lambda distance, window: distance < 0)),
    ("the full layers' log scaling", "fields", lambda path: _with_layout(path, log_floor=None)),
    ("K's and V's short convolutions", "attr", (inkling_attention, "short_conv", _identity_conv)),
    ("the sublayer outputs' short convolutions", "attr", (inkling, "short_conv", _identity_conv)),
    ("the shared experts in the routing softmax", "attr",
     (inkling.InklingMoE, "expert_weights", staticmethod(_shared_weights_apart))),
    ("the hidden states divided by the muP multiplier", "fields", lambda path: _with_layout(path, logits_divisor=1.0)),
]


_attend_all = inkling_attention.PoolAttention.attend_all


def _no_sinks(self, q, r, profiles, reqs, fb, slot, sinks=None):
    return _attend_all(self, q, r, profiles, reqs, fb, slot)


def _unclipped(x, threshold, scale=None):
    return x if scale is None else (x.float() * scale.float()).to(x.dtype)


def _static_taps(self, x_in, taps, tap_proj):
    return taps.float().t().reshape(self.num_kv_heads, -1, self.kernel)


DIFFERENCES_2 = [
    ("the block attention residuals", "attr",
     (inkling2, "block_attention", lambda queries, blocks, partial: partial.float().expand(
         queries.numel() // partial.shape[-1], -1, -1))),
    ("the L2 clips", "attr", (inkling2_attention, "l2_clip", _unclipped)),
    ("the attention sinks", "attr", (inkling_attention.PoolAttention, "attend_all", _no_sinks)),
    ("the attention output gate", "attr", (inkling2_attention.Inkling2Attention, "gated", lambda self, out, q_in: out)),
    ("the per-token K/V convolution taps", "attr",
     (inkling2_attention.Inkling2Attention, "tap_weights", _static_taps)),
    ("the experts' softcaps", "attr", (inkling2.Inkling2Experts, "softcapped_swiglu", lambda self, x: silu_mul(x))),
    ("the full layers' log scaling", "fields", lambda path: _with_layout(path, log_floor=None)),
    ("the logits' soft cap", "fields", {"final_softcap": None}),
]


def _single_pass(path):
    c = loader.read_model_config(path)
    start, end, _, rank = c.inkling.loop
    return {"num_layers": 7, "inkling": dataclasses.replace(c.inkling, loop=(start, end, 1, rank))}


DIFFERENCES_LOOP = [
    ("the loop's later passes", "fields", _single_pass),
    ("the message gates", "attr", (inkling2_loop.MessageGates, "forward", lambda self, i, x, message: x.float())),
]
_ALL_DIFFERENCES = ([("inkling", *d) for d in DIFFERENCES] + [("inkling2", *d) for d in DIFFERENCES_2]
                    + [("inkling2_loop", *d) for d in DIFFERENCES_LOOP])


@pytest.mark.parametrize("arch,left_out,how,change", _ALL_DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in _ALL_DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, tiny_model, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    _, path, hf, ids = _case(arch, tiny_model)
    change = change(path) if callable(change) else change
    check_difference_left_out((path, ids, hf(ids)), left_out, how, change, tmp_path, monkeypatch)


def test_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("inkling", tiny_model))
    ink = c.inkling
    assert (ink.sliding_layers, ink.window, ink.swa_shape, ink.full_shape) == ((0, 2), 5, (4, 2, 8), (2, 1, 16))
    assert (ink.d_rel, ink.rel_extent, ink.log_floor, ink.log_alpha, ink.conv_kernel) == (4, 7, 4, 0.5, 3)
    assert (ink.sparse_layers, ink.experts, ink.top_k, ink.shared_experts, ink.expert_intermediate) == (
        (1, 2, 3), 4, 2, 2, 16)
    assert (ink.route_scale, ink.logits_divisor, c.intermediate_size, c.vocab_size) == (2.0, 0.5, 48,
                                                                                       ink.embed_rows - 4)
    assert (c.kv_layers, c.num_kv_heads, c.head_dim, c.recurrent_layers, c.layer_windows) == (4, 1, 16, (), ())


def test_inkling2_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("inkling2", tiny_model))
    ink = c.inkling
    assert (ink.sliding_layers, ink.swa_shape, ink.full_shape, ink.sparse_layers) == ((1, 3, 4), (4, 2, 8), (2, 1, 16),
                                                                                     (0, 1, 2, 3, 4))
    assert (ink.qk_clip, ink.rel_clip, ink.res_block, ink.gate_softcap, ink.up_softcap) == (0.3, 0.1, 2, 0.5, 0.5)
    assert (c.vocab_size, ink.embed_rows, c.final_softcap, ink.shared_experts, ink.logits_divisor) == (
        ink.embed_rows - 8, len(load_tokenizer(_case.path("inkling2", tiny_model))), 2.0, 0, 1.0)


def test_inkling2_loop_config_fields(tiny_model):
    c = loader.read_model_config(_case.path("inkling2_loop", tiny_model))
    assert (c.inkling.loop, c.num_layers, c.kv_layers, c.inkling.sliding_layers) == ((2, 6, 3, 8), 15, 15,
                                                                                     (1, 3, 4, 6))


def test_what_inkling2_cannot_run_is_refused():
    from transformers.models.inkling2.configuration_inkling2 import Inkling2TextConfig

    config = Inkling2TextConfig(vocab_size=300, unpadded_vocab_size=300, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=16, swa_num_attention_heads=4,
                                swa_num_key_value_heads=2, swa_head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
                                eos_token_id=1, architectures=["Inkling2ForCausalLM"])
    config.scoring_func = "softmax"
    with pytest.raises(ValueError, match="scoring_func"):
        ModelConfig.from_hf(config)


@pytest.mark.parametrize("changes, field", [({"hidden_act": "gelu"}, "activation"),
                                            ({"shared_expert_sink": False}, "shared_expert_sink"),
                                            ({"swa_num_key_value_heads": 3}, "key/value heads"),
                                            ({"layer_types": ["hybrid", "sliding_attention"]}, "layer_types"),
                                            ({"mlp_layer_types": ["dense", "moe"]}, "mlp_layer_types")])
def test_what_inkling_cannot_run_is_refused(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(_config(**changes))


@pytest.mark.parametrize("arch", TINY_INKLING_ARCHS)
def test_served_greedily_as_hf_generates(tiny_model, arch):
    assert_greedy_serving_matches_hf(_case.path(arch, tiny_model))


@pytest.mark.parametrize("arch", TINY_INKLING_ARCHS)
def test_a_system_prompt_and_a_second_turn_from_the_state_snapshots(tiny_model, arch):
    """A second user of a system prompt computes it and keeps its convolution inputs there, a third starts from them,
    and a second turn starts where the first turn ended, each with HF's greedy tokens; plain decodes in flight."""
    assert_snapshots_serve_as_hf_generates(_case.path(arch, tiny_model), overlap_schedule=True)
