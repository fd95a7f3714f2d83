"""Mistral Large 4 served for text prompts (runtime/models/mistral_large4.py, mistral_large4_config.py): HF's
MistralLarge4ForConditionalGeneration on the same tiny random weights (tiny_mlarge4_models.py, saved by transformers
in Mistral's own names), called with token ids only: its float64 logits within the derived bound (logits_oracle.py)
as a prefill, an extend after a cached prefix and decodes; each of its differences from DeepSeek's MLA left out
leaves that bound; its greedy tokens through the real runner and scheduler.
"""

import dataclasses
import random

import pytest
import torch
from logits_oracle import HF
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from test_vl_text_wrappers import _assert_same_weights, _saved_as, assert_text_path_matches_hf
from tiny_mlarge4_models import TINY_MLARGE4, make_mlarge4, mlarge4_config

from radixlm.runtime.models import mistral_large4
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.layer_ops import rms_norm
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.mla import LATENT_NORM_EPS
from radixlm.runtime.models.moe_config import MoEConfig

LENGTH = 20


@pytest.fixture(scope="module")
def mlarge4(tmp_path_factory):
    return make_mlarge4(tmp_path_factory)


def test_prefill_extend_and_decode_match_hf(mlarge4):
    assert_text_path_matches_hf(TINY_MLARGE4, mlarge4)


def test_layout_read_from_the_config(mlarge4):
    """NoPE layers 1 and 3, layers 2 and 3 reusing 0's and 1's KV (two pool layers), the cap, the context."""
    c = read_model_config(mlarge4)
    assert (c.language_model, c.nope_layers, c.kv_source_layers, c.kv_layers) == (
        "MistralLarge4TextForCausalLM", (1, 3), (0, 1, 0, 1), 2)
    moe = (c.moe.norm_topk_prob, c.moe.outside_groups_score, c.moe.router_float32)
    assert (c.final_softcap, c.context_length, moe) == (2.0, 128, (True, 0.0, True))


_ATTN, _MODEL = mistral_large4.MistralLarge4Attention, mistral_large4.MistralLarge4ForCausalLM
_MOE_FROM_HF = MoEConfig.from_hf.__func__
DIFFERENCES = [
    ("the per-head query scaling by log(position + 1)", "patch",
     (_ATTN, "query_factor", lambda self, pos, dtype: torch.ones(pos.shape[0], self.num_heads, 1, dtype=dtype))),
    ("each reusing layer over its source's pool layer (not the last owner's before it)", "patch",
     (_ATTN, "pool_layer", staticmethod(lambda sources, i: sum(s == j for j, s in enumerate(sources[:i]))
                                        - (sources[i] != i)))),
    ("LeRoPE's alpha", "patch", (_MODEL, "_lerope_table", lambda self: None)),
    ("the logit soft-cap", "fields", {"final_softcap": None}),
    ("kv_a_layernorm's eps rms_norm_eps", "patch",
     (_ATTN, "latent_norm", lambda self, x, w: rms_norm(x, w, LATENT_NORM_EPS))),
    ("the renormalised top-k", "patch", (MoEConfig, "from_hf", classmethod(
        lambda cls, hf, arch: dataclasses.replace(_MOE_FROM_HF(cls, hf, arch), norm_topk_prob=False)))),
]


@pytest.mark.parametrize("left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(left_out, how, change, mlarge4, tmp_path, monkeypatch):
    """Each of these left out leaves the bound of HF's own float noise (the NoPE layers and the KV reuse are bound by
    the weights' shapes: a NoPE layer's kv_b_proj has N + R key rows, a reusing layer no kv_a_proj_with_mqa)."""
    ids = random.Random(21).choices(range(read_model_config(mlarge4).vocab_size), k=LENGTH)
    check_difference_left_out((mlarge4, ids, HF(mlarge4)(ids)), left_out, how, change, tmp_path, monkeypatch)


def test_module_names_load_the_same_weights(mlarge4, tmp_path):
    """The checkpoint under transformers' module names (HF's state dict: model.language_model.*, stacked experts)
    loads the weights of Mistral's names, as transformers saves them."""
    from transformers import AutoModelForImageTextToText

    modules = {k: v.contiguous() for k, v in AutoModelForImageTextToText.from_pretrained(mlarge4).state_dict().items()}
    assert "model.language_model.rotary_emb.alpha" in modules and "lerope.alpha" in dict(iter_safetensors(mlarge4))
    _assert_same_weights(*_saved_as(mlarge4, tmp_path, modules))


def test_greedy_serving_matches_hf_generate(mlarge4):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens."""
    hf = assert_greedy_serving_matches_hf(mlarge4)
    assert type(hf).__name__ == "MistralLarge4ForConditionalGeneration"


@pytest.mark.parametrize("change,message", [
    (dict(kv_source_layers=[0, 1, 1, 1]), r"kv_source_layers\[2\] = 1, but HF's layer 2 reads the KV of layer None"),
    (dict(kv_source_layers=[0, 1, 0, 0]), r"kv_source_layers\[3\] = 0, but HF's layer 3 reads the KV of layer None"),
    (dict(kv_source_layers=[0, 1, 3, 3]), r"kv_source_layers\[2\] = 3 must be an earlier layer that owns its KV"),
    (dict(attention_bias=True), "attention_bias=True is not supported"),
])
def test_configs_we_do_not_run_are_refused(change, message):
    """KV reuse that HF's layers do not run as kv_source_layers says (HF reads the last earlier sharing layer of the
    same kind, rope or NoPE), attention biases."""
    config = mlarge4_config(TINY_MLARGE4, vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
