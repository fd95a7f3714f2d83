"""Cohere 2 MoE (cohere2_moe.py), BitNet (bitnet.py), Aria's text model (aria.py), Emu3's text model (llama.py),
Cohere Compass's text model (cohere_compass.py), Gemma 4 Unified's text model (gemma4.py) and Apertus 1.5's text model
(apertus1p5.py; all newtext_config.py) against HF transformers on the same tiny random weights (logits_oracle.py),
each served as prefills, a chunk beside a decode and decodes through the paged pool, and greedily through the
scheduler.

The tiny models (tests/tiny_newtext_models.py): Cohere 2 MoE's dense full layer that rotates, two sliding layers
(window 6) and a full one without rope over 8 experts (top 2) and a shared one, logits x 0.5; once with LayerNorms,
softmax scores and the shared expert averaged, once with RMSNorms, unrenormalised sigmoid scores and summed.  BitNet's
sub-norms and relu^2; Aria's experts stored transposed and its two shared experts; Emu3 is Llama's layer; Cohere
Compass's sliding layers rotating at base 100 around a full layer without rope; Gemma 4 Unified's sliding and full
layers with KV shared; Apertus 1.5's embeddings 16 rows wider than its pruned lm head.
test_each_difference_matters proves the oracle notices any one of them left out (Emu3, Gemma 4 Unified and Apertus
1.5 add nothing to the layers they reuse).
"""

import pytest
import torch
import transformers
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_newtext_models import TINY_NEWTEXT_ARCHS

from radixlm.runtime.models import aria, bitnet, cohere2_moe, moe
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaAttention
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.moe_config import MoEConfig
from radixlm.runtime.models.newtext_config import Cohere2MoeLayers
from radixlm.runtime.models.packed_linear import linear

LENGTH = 26
_RMS_MOE = dict(num_experts=8, top_k=2, intermediate_size=32, sparse_layers=(1, 2, 3),
                shared_expert_intermediate_size=32, shared_expert_gate=False)
_read_aria = aria.AriaTextForCausalLM.checkpoint_tensors


def _bitnet_mlp_without(norm: bool, square: bool):
    def forward(self, x):
        gate, up = linear(x, self.gate_up_proj).chunk(2, dim=-1)
        h = (torch.relu(gate).square() if square else torch.relu(gate)) * up
        return linear(bitnet.rms_norm(h, self.ffn_sub_norm, self.eps) if norm else h, self.down_proj)
    return forward


def _aria_read(change):
    """Aria's checkpoint reading, each (name, tensor) then through change."""
    return lambda self, named: (change(n, t) for n, t in _read_aria(self, named))


# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("cohere2_moe", "the shared expert averaged", "attr",
     (cohere2_moe.AveragedSharedMoeBlock, "forward", moe.SparseMoeBlock.forward)),
    ("cohere2_moe", "the dense layer's rope", "fields", {"nope_layers": (0, 3)}),
    ("cohere2_moe", "the windows", "fields", {"layer_windows": (None,) * 4}),
    ("cohere2_moe", "the logit scale", "fields", {"logit_scale": None}),
    ("cohere2_moe", "the LayerNorms", "fields", {"cohere2_moe": Cohere2MoeLayers(True, True)}),
    ("cohere2_moe_rms", "the RMSNorms", "fields", {"cohere2_moe": Cohere2MoeLayers(False, False)}),
    ("cohere2_moe_rms", "the sigmoid scores", "fields",
     {"moe": MoEConfig(norm_topk_prob=False, scoring="softmax", **_RMS_MOE)}),
    ("cohere2_moe_rms", "the weights not renormalised", "fields",
     {"moe": MoEConfig(norm_topk_prob=True, scoring="sigmoid", **_RMS_MOE)}),
    ("bitnet", "the attention sub-norm", "attr", (bitnet.BitNetAttention, "forward", LlamaAttention.forward)),
    ("bitnet", "the FFN sub-norm", "attr", (bitnet.BitNetMLP, "forward", _bitnet_mlp_without(False, True))),
    ("bitnet", "the square of relu^2", "attr", (bitnet.BitNetMLP, "forward", _bitnet_mlp_without(True, False))),
    ("aria_text", "the shared experts", "attr", (aria.AriaTextForCausalLM, "checkpoint_tensors",
                                                 _aria_read(lambda n, t: (n, 0 * t if "shared_experts" in n else t)))),
    ("aria_text", "fc1's gate columns before its up columns", "attr",
     (aria.AriaTextForCausalLM, "checkpoint_tensors", _aria_read(lambda n, t: (_swap_gate_up(n), t)))),
    ("cohere_compass", "the sliding layers' rope base", "fields", {"layer_rope_thetas": (1e4, 0.0, 1e4)}),
    ("cohere_compass", "the layer without rope", "fields", {"nope_layers": ()}),
    ("cohere_compass", "the windows", "fields", {"layer_windows": (None,) * 3}),
    ("cohere_compass", "the logit scale", "fields", {"logit_scale": None}),
]


def _swap_gate_up(name):
    """A routed expert's gate read as its up and the other way round."""
    if ".mlp.experts." not in name:
        return name
    return name.replace("gate_proj", "tmp").replace("up_proj", "gate_proj").replace("tmp", "up_proj")


@pytest.fixture(scope="module", autouse=True)
def emu3_text_class():
    """Emu3's text model saves as emu3_text_model, which no Auto class loads: the oracle builds Emu3ForCausalLM."""
    import tiny_models

    auto = tiny_models.hf_auto_class
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiny_models, "hf_auto_class",
                      lambda model_type: transformers.Emu3ForCausalLM if model_type == "emu3_text_model"
                      else auto(model_type))
        yield


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", TINY_NEWTEXT_ARCHS)
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """As served (packed weights, experts): two prefills in one step, a chunk beside a decode, then both rows decoding
    past the windows (one HF run: each row reads a prefix of its prompt)."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


@pytest.mark.parametrize("arch", [arch for arch in TINY_NEWTEXT_ARCHS if arch != "cohere2_moe_rms"])
def test_served_greedily_as_hf_generates(arch, tiny_model):
    assert_greedy_serving_matches_hf(tiny_model(arch))


def test_model_config_fields(tiny_model):
    c = read_model_config(tiny_model("cohere2_moe"))
    assert c.nope_layers == (3,) and c.layer_windows == (None, 6, 6, None) and c.logit_scale == 0.5
    assert c.intermediate_size == 96 and c.cohere2_moe == Cohere2MoeLayers(False, True) and c.o_proj_bias
    assert c.moe == MoEConfig(norm_topk_prob=True, **_RMS_MOE)
    c = read_model_config(tiny_model("cohere2_moe_rms"))
    assert c.cohere2_moe == Cohere2MoeLayers(True, False) and c.rms_norm_eps == 1e-5
    assert c.moe == MoEConfig(norm_topk_prob=False, scoring="sigmoid", **_RMS_MOE)
    c = read_model_config(tiny_model("aria_text"))
    assert (c.moe.num_experts, c.moe.top_k, c.moe.shared_expert_intermediate_size) == (8, 2, 64)
    assert c.moe.sparse_layers == (0, 1) and not c.moe.shared_expert_gate
    assert read_model_config(tiny_model("bitnet")).hidden_act == "relu2"
    c = read_model_config(tiny_model("cohere_compass"))
    assert c.layer_rope_thetas == (100.0, 0.0, 100.0) and c.nope_layers == (1,) and c.layer_windows == (6, None, 6)
    assert c.logit_scale == 0.5 and c.attention_bias and c.o_proj_bias and not c.qk_norm
    path = tiny_model("apertus1p5")   # the lm head's vocabulary, not the embeddings'
    assert read_model_config(path).vocab_size == transformers.AutoConfig.from_pretrained(path).output_vocab_size
    g = read_model_config(tiny_model("gemma4_unified")).gemma4   # Gemma 4's layers without per-layer inputs, experts
    assert g.per_layer_input == 0 and g.num_experts == 0 and g.kv_source == (0, 1, 2, 2, 1) and g.k_eq_v[1]


def test_refusals():
    """A packed BitNet checkpoint, a Cohere 2 MoE routing or shared-expert rule HF does not name, and activations
    other than the one each runs, are refused."""
    config = transformers.BitNetConfig(num_hidden_layers=1, architectures=["BitNetForCausalLM"])
    config.quantization_config = {"quant_method": "bitnet", "linear_class": "autobitlinear"}
    with pytest.raises(ValueError, match="quantization_config"):
        ModelConfig.from_hf(config)
    for field, value in (("expert_selection_fn", "sparsemixer"), ("shared_expert_combination_strategy", "max"),
                         ("hidden_act", "gelu")):
        config = transformers.Cohere2MoeConfig(num_hidden_layers=2, architectures=["Cohere2MoeForCausalLM"])
        object.__setattr__(config, field, value)
        with pytest.raises(ValueError, match=field):
            ModelConfig.from_hf(config)
    config = transformers.CohereCompassTextConfig(num_hidden_layers=1, architectures=["CohereCompassForCausalLM"])
    config.rope_parameters = {"full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}}
    with pytest.raises(ValueError, match="rope_parameters"):
        ModelConfig.from_hf(config)
    config = transformers.Apertus1p5TextConfig(num_hidden_layers=1, vocab_size=64, output_vocab_size=32,
                                               tie_word_embeddings=True, architectures=["Apertus1p5TextForCausalLM"])
    with pytest.raises(ValueError, match="output_vocab_size"):
        ModelConfig.from_hf(config)
    config = transformers.AriaTextConfig(num_hidden_layers=1, architectures=["AriaTextForCausalLM"])
    object.__setattr__(config, "hidden_act", "gelu")
    with pytest.raises(ValueError, match="hidden_act"):
        ModelConfig.from_hf(config)
