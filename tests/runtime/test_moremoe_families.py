"""The "moremoe" group: LongCat-Flash (longcat_flash.py, longcat_flash_config.py), MiMo-V2-Flash (mimo_v2_flash.py,
mimo_v2_flash_config.py) and Doge (doge.py, doge_config.py): what sets each apart, against HF transformers on the same tiny random weights
(logits_oracle.py), served as prefills, a chunk beside a decode and decodes, and greedily through the scheduler.

The tiny models (tests/tiny_moremoe_models.py): LongCat's 2 layers of two MLA sublayers each (4 KV layers), dense
MLPs, and a shortcut mixture of 8 experts and 4 zero experts, top 3, weights x 2, the choice moved by
e_score_correction_bias.  MiMo's full, sliding (window 6, sinks), sliding, full layers with 2 and 4 KV heads, heads of
24 (8 rotating, a rope base per layer type), values of 16 times 0.7, then DeepSeek-V3-routed experts in 2 groups.
Doge's dynamic mask (a score bias per key and KV head), window of 6, residual scales, biases everywhere.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import pytest
import torch
from paged_checks import (
    FamilyCases,
    check_batched_prefills_chunks_and_decodes,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    hf_logits_cache,
)
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_MOREMOE_ARCHS

from radixlm.runtime.models import doge, kolibri1_1, longcat_flash, mimo_v2_flash
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.kolibri1_1_config import Kolibri11Layers
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.mimo_v2_flash_config import MimoLayers
from radixlm.runtime.models.mla_config import MLAConfig
from radixlm.runtime.models.moe import SparseMoeBlock
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 24


def _no_shortcut(self, x, rotary, fb):
    """LongCat's layer with the experts' output joining right after the first MLP, not at the layer's end."""
    x = x + self.self_attn[0](longcat_flash.rms_norm(x, self.input_layernorm[0], self.eps), rotary, fb)
    m = longcat_flash.rms_norm(x, self.post_attention_layernorm[0], self.eps)
    x = x + self.mlps[0](m) + self.mlp(m)
    x = x + self.self_attn[1](longcat_flash.rms_norm(x, self.input_layernorm[1], self.eps), rotary, fb)
    return x + self.mlps[1](longcat_flash.rms_norm(x, self.post_attention_layernorm[1], self.eps))


def _unscaled_residuals(self, x, rotary, fb):
    """Doge's layer with plain residuals."""
    x = x + self.self_attn(doge.rms_norm(x, self.input_layernorm, self.eps), rotary, fb)
    return x + self.mlp(doge.rms_norm(x, self.post_attention_layernorm, self.eps))


_variants = AttentionBackend.set_layer_variants
_NO_SINKS = (AttentionBackend, "set_layer_variants",
             lambda self, windows, softcap=None, sinks=None, chunks=None: _variants(self, windows, softcap, None, chunks))
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
    ("mimo_v2_flash", "the sinks", "attr", _NO_SINKS),
    ("mimo_v2_flash", "the value scale", "fields", {"mimo": MimoLayers((2, 4, 4, 2), 16, 1.0)}),
    ("mimo_v2_flash", "the rope base per layer type", "fields", {"local_rope_theta": 500.0}),
    ("mimo_v2_flash", "the partial rotary", "fields", {"local_rotary_dim": 24}),
    ("mimo_v2_flash", "the window", "json", {"sliding_window": 200}),
    ("mimo_v2_flash", "each KV head repeated in place", "attr",
     (mimo_v2_flash.NarrowValueAttention, "to_pool",
      lambda self, x: x.repeat(1, self.pool_heads // self.kv_heads, 1))),
    ("doge", "the dynamic mask", "attr",
     (doge.DynamicMaskAttention, "key_bias", lambda self, v: v.new_zeros(v.shape[0], self.kv_heads))),
    ("doge", "the residual scales", "attr", (doge.DogeLayer, "forward", _unscaled_residuals)),
    ("doge", "the window", "fields", {"layer_windows": ()}),
    ("kolibri1_1", "the NVFP4 rounding", "attr", (kolibri1_1, "nvfp4_round", lambda x: x)),
    ("kolibri1_1", "no rope on the indexed layers", "fields", {"nope_layers": ()}),
    ("kolibri1_1", "the window", "fields", {"layer_windows": (None,) * 4}),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


_case = FamilyCases({"longcat_flash": "LongcatFlashConfig", "mimo_v2_flash": "MiMoV2FlashConfig",
                     "doge": "DogeConfig", "kolibri1_1": "Kolibri1_1Config"}, LENGTH)


@pytest.fixture(scope="module", params=TINY_MOREMOE_ARCHS)
def fam(request, tiny_model):
    return _case(request.param, tiny_model)


def test_prefills_extends_chunks_and_decodes(fam):
    """Alone and batched, extending a cached prefix, in chunks of 5, decoding in pairs and beside a prefill."""
    check_prefill_single_and_batch(fam)
    check_extend_on_a_cached_prefix(fam, 9)
    check_chunked_prefill(fam, 5)
    check_decode_pair(fam, 12, 15)
    check_mixed_step(fam, 14, 9)


@pytest.mark.parametrize("arch", TINY_MOREMOE_ARCHS)
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """As served (packed weights): two prefills in one step, a chunk beside a decode, then both rows decoding."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


@pytest.mark.parametrize("arch", TINY_MOREMOE_ARCHS)
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


def test_mimo_config_fields(tiny_model):
    c = read_model_config(tiny_model("mimo_v2_flash"))
    assert c.mimo == MimoLayers((2, 4, 4, 2), 16, 0.7) and c.num_kv_heads == 4 and c.head_dim == 24
    assert c.layer_windows == (None, 6, 6, None) and (c.rope_theta, c.local_rope_theta) == (500.0, 10000.0)
    assert c.rotary_dim == c.local_rotary_dim == 8 and c.attention_bias and not c.o_proj_bias
    assert c.moe.sparse_layers == (1, 2, 3) and c.moe.scoring == "sigmoid" and c.moe.n_group == 2
    assert c.moe.shared_expert_intermediate_size == 0 and c.moe.routed_scaling_factor == 2.0


@pytest.mark.parametrize("field,value,match", [
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}, "rope_type"),
    ("v_head_dim", 256, "v_head_dim")])
def test_mimo_refusals(field, value, match):
    import transformers

    config = transformers.MiMoV2FlashConfig(num_hidden_layers=2, architectures=["MiMoV2FlashForCausalLM"])
    setattr(config, field, value)
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_hf(config)


def test_doge_refusal_and_context():
    """is_moe is refused; the served context is capped at keep_window_size."""
    import transformers

    config = transformers.DogeConfig(num_hidden_layers=1, max_position_embeddings=128, keep_window_size=64,
                                     architectures=["DogeForCausalLM"])
    assert ModelConfig.from_hf(config).context_length == 64
    config.is_moe = True
    with pytest.raises(ValueError, match="is_moe"):
        ModelConfig.from_hf(config)


def test_kolibri1_1_config_fields(tiny_model):
    """The context capped at the dense budget (64 + 16 + 4), indexed layers without rope, layer 2 on layer 1's KV."""
    c = read_model_config(tiny_model("kolibri1_1"))
    assert c.kolibri1_1 == Kolibri11Layers((0, 1, 1, 3), (1, 2), (0,), 40) and c.context_length == 84
    assert c.nope_layers == (1, 2) and c.layer_windows == (6, None, None, 6) and c.moe.sparse_layers == (1, 2, 3)


def test_nvfp4_round_as_hf():
    """nvfp4_round gives HF's nvfp4_fake_quantize, ties and the scale's clamps included."""
    from transformers.models.kolibri1_1.modeling_kolibri1_1 import nvfp4_fake_quantize

    x = torch.cat((torch.randn(64, 32, generator=torch.Generator().manual_seed(0)) * 3,
                   torch.tensor([[0.25, 0.75, 2.5, 5.0] * 8, [1e-6] * 32, [1e4] * 32])))
    torch.testing.assert_close(kolibri1_1.nvfp4_round(x), nvfp4_fake_quantize(x), rtol=0, atol=0)
