"""The "moremoe" group: LongCat-Flash (longcat_flash.py, longcat_flash_config.py): what sets it apart, against HF
transformers on the same tiny random weights (logits_oracle.py), served as prefills, a chunk beside a decode and
decodes, and greedily through the scheduler.

The tiny model (tests/tiny_moremoe_models.py): 2 layers of two MLA sublayers each (4 KV layers), dense MLPs, and a
shortcut mixture of 8 experts and 4 zero experts, top 3, weights x 2, the choice moved by e_score_correction_bias.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import pytest
import torch
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf

from radixlm.runtime.models import longcat_flash
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.mla_config import MLAConfig
from radixlm.runtime.models.moe import SparseMoeBlock

LENGTH = 24


def _no_shortcut(self, x, rotary, fb):
    """LongCat's layer with the experts' output joining right after the first MLP, not at the layer's end."""
    x = x + self.self_attn[0](longcat_flash.rms_norm(x, self.input_layernorm[0], self.eps), rotary, fb)
    m = longcat_flash.rms_norm(x, self.post_attention_layernorm[0], self.eps)
    x = x + self.mlps[0](m) + self.mlp(m)
    x = x + self.self_attn[1](longcat_flash.rms_norm(x, self.input_layernorm[1], self.eps), rotary, fb)
    return x + self.mlps[1](longcat_flash.rms_norm(x, self.post_attention_layernorm[1], self.eps))


_fold = longcat_flash.LongcatFlashForCausalLM._sublayer_tensor
# (arch, what is left out, how, value): as test_d2_families.py's
DIFFERENCES = [
    ("longcat_flash", "the zero experts", "attr", (longcat_flash.ZeroExpertMoeBlock, "forward", SparseMoeBlock.forward)),
    ("longcat_flash", "the shortcut", "attr", (longcat_flash.LongcatFlashLayer, "forward", _no_shortcut)),
    ("longcat_flash", "the query scale", "attr",
     (longcat_flash.LongcatFlashForCausalLM, "_sublayer_tensor",
      lambda self, kind, name, t: _fold(self, kind, name, t) / (self.config.longcat.q_scale if kind == "q_b_proj"
                                                                 else 1.0))),
    ("longcat_flash", "the latent scale", "attr",
     (longcat_flash.LongcatFlashForCausalLM, "_sublayer_tensor",
      lambda self, kind, name, t: t if kind == "kv_a_layernorm" else
      _fold(self, kind, name, t))),
    ("longcat_flash", "the interleaved rope", "fields", {"mla": MLAConfig(24, 32, 16, 8, 16, rope_interleave=False)}),
    ("longcat_flash", "routed_scaling_factor", "json", {"routed_scaling_factor": 1.0}),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", ["longcat_flash"])
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """As served (packed weights): two prefills in one step, a chunk beside a decode, then both rows decoding."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


@pytest.mark.parametrize("arch", ["longcat_flash"])
def test_served_greedily_as_hf_generates(arch, tiny_model):
    assert_greedy_serving_matches_hf(tiny_model(arch))


def test_longcat_config_fields(tiny_model):
    c = read_model_config(tiny_model("longcat_flash"))
    assert c.num_layers == c.kv_layers == 4 and c.num_kv_heads == 1 and c.head_dim == 8 + 32 and c.mla.rope_interleave
    moe = c.longcat.moe
    assert (moe.num_experts, moe.local_experts, moe.top_k, moe.intermediate_size) == (12, 8, 3, 32)
    assert moe.correction_bias and not moe.norm_topk_prob and moe.routed_scaling_factor == 2.0
    assert c.intermediate_size == 64 and c.longcat.q_scale == (64 / 24) ** 0.5 and c.longcat.latent_scale == 2 ** 0.5


@pytest.mark.parametrize("field,value", [("router_bias", True), ("qk_head_dim", 20), ("attention_bias", True)])
def test_longcat_refusals(field, value):
    import transformers

    config = transformers.LongcatFlashConfig(num_layers=1, architectures=["LongcatFlashForCausalLM"])
    setattr(config, field, value)
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(config)


def test_zero_experts_return_their_input():
    """A token routed only to zero experts leaves the block as its input times its weights' sum."""
    torch.manual_seed(0)
    config = transformers_free_layout()
    block = longcat_flash.ZeroExpertMoeBlock(8, config, torch.float32, "cpu")
    for p in block.parameters():
        p.data.normal_()
    block.correction_bias.data[:] = torch.tensor([-9.0] * 2 + [9.0] * 2)
    x = torch.randn(3, 8)
    scores = torch.softmax(x @ block.gate.t(), dim=-1)[:, 2:].sum(dim=-1, keepdim=True)
    torch.testing.assert_close(block(x), x * scores)


def transformers_free_layout():
    from radixlm.runtime.models.moe_config import MoEConfig

    return MoEConfig(num_experts=4, num_local_experts=2, top_k=2, intermediate_size=4, norm_topk_prob=False,
                     sparse_layers=(0,), correction_bias=True, router_float32=True)
