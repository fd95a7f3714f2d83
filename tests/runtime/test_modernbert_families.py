"""The ModernBERT decoder (modernbert_decoder.py, modernbert_config.py) against HF transformers on the same tiny random
weights (logits_oracle.py; tests/tiny_modernbert_models.py): tied with every bias, and HF's defaults untied, each served
as prefills, a chunk beside a decode and decodes past the window; the tied one through the real runner and scheduler
against HF's greedy tokens.  test_each_difference_matters proves the oracle notices any one of what sets it apart left
out.
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_MODERNBERT_ARCHS

from radixlm.runtime.models import modernbert_decoder as mb
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.modernbert_config import ModernBertLayout
from radixlm.runtime.models.own_layers import OwnLayersForCausalLM
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 26
_LAYOUT = ModernBertLayout(norm_bias=True, head_act="relu", head_bias=True, decoder_bias=True)
_variants = AttentionBackend.set_layer_variants
_NO_WINDOWS = (AttentionBackend, "set_layer_variants",
               lambda self, windows, *rest, **kw: _variants(self, (None,) * len(windows), *rest, **kw))
_targets = mb.ModernBertDecoderForCausalLM._weight_targets


def _left_out(*names):
    """_weight_targets whose `names` (biases) stay zero: their checkpoint tensors land in scratch copies."""
    def targets(self):
        t = _targets(self)
        for name in names:
            dst, _ = t[name]
            dst.zero_()
            t[name] = (torch.empty_like(dst), False)
        return t
    return mb.ModernBertDecoderForCausalLM, "_weight_targets", targets


def _layer0_normed(self, x, rotary, fb):
    h = F.layer_norm(x, (x.shape[-1],), eps=1e-5) if self.input_layernorm is None else self.input_layernorm(x)
    x = x + self.self_attn(h, rotary, fb)
    return x + self.mlp(self.post_attention_layernorm(x))


def _swapped_halves(self, x):
    gate, h = mb.linear(x, self.gate_up_proj, self.gate_up_bias, None).chunk(2, dim=-1)
    return mb.linear(self.act(h) * gate, self.down_proj, self.down_bias, None)


_NORMS = ("model.embed_norm.bias", "model.norm.bias", "model.head_norm.bias",
          *(f"model.layers.{i}.post_attention_layernorm.bias" for i in range(3)),
          *(f"model.layers.{i}.input_layernorm.bias" for i in (1, 2)))
# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("modernbert_decoder", "the sliding window", "attr", _NO_WINDOWS),
    ("modernbert_decoder", "the sliding layers' rope base", "fields", {"local_rope_theta": 1000.0}),
    ("modernbert_decoder", "the full layers' rope base", "fields", {"rope_theta": 100.0}),
    ("modernbert_decoder", "the embedding norm", "attr",
     (mb.ModernBertDecoderForCausalLM, "embed_inputs", OwnLayersForCausalLM.embed_inputs)),
    ("modernbert_decoder", "the head transform", "attr",
     (mb.ModernBertDecoderForCausalLM, "transform_head", lambda self, x: x)),
    ("modernbert_decoder", "the head's own activation", "fields",
     {"modernbert": dataclasses.replace(_LAYOUT, head_act="gelu")}),
    ("modernbert_decoder", "the MLP's exact gelu", "fields", {"hidden_act": "gelu_tanh"}),
    ("modernbert_decoder", "the norms' biases", "attr", _left_out(*_NORMS)),
    ("modernbert_decoder", "the decoder's bias", "attr", _left_out("lm_head.bias")),
    ("modernbert_decoder", "the head dense's bias", "attr", _left_out("model.head_dense.bias")),
    ("modernbert_decoder", "layer 0 without an attention norm", "attr", (mb.ModernBertLayer, "forward", _layer0_normed)),
    ("modernbert_decoder", "the activated half of Wi", "attr", (mb.ModernBertMLP, "forward", _swapped_halves)),
    ("modernbert_decoder_plain", "its own lm head", "fields", {"tie_word_embeddings": True}),
    ("modernbert_decoder_plain", "the sliding window", "attr", _NO_WINDOWS),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", TINY_MODERNBERT_ARCHS)
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """As served (packed weights): two prefills in one step, a chunk beside a decode, then both rows decoding past the
    window of 6 (one HF run: each row reads a prefix of its prompt)."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


def test_greedy_serving_matches_hf(tiny_model):
    """Through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    assert_greedy_serving_matches_hf(tiny_model("modernbert_decoder"))


def test_model_config_fields(tiny_model):
    c = read_model_config(tiny_model("modernbert_decoder"))
    assert c.layer_windows == (None, 6, None) and (c.rope_theta, c.local_rope_theta) == (1000.0, 100.0)
    assert c.modernbert == _LAYOUT and c.tie_word_embeddings and c.hidden_act == "gelu"
    assert c.attention_bias and c.o_proj_bias and c.mlp_bias and (c.num_kv_heads, c.head_dim) == (4, 16)
    c = read_model_config(tiny_model("modernbert_decoder_plain"))
    assert c.modernbert == ModernBertLayout(decoder_bias=False) and not c.tie_word_embeddings
    assert not (c.attention_bias or c.o_proj_bias or c.mlp_bias)


def test_hf_defaults():
    """HF's defaults: every third layer from 0 full, a window of local_attention // 2 = 64, rope bases 160000 (full)
    and 10000 (sliding), gelu everywhere, tied with the decoder's bias; the released configs' global_rope_theta and
    local_rope_theta as HF reads them."""
    import transformers

    c = ModelConfig.from_hf(transformers.ModernBertDecoderConfig(num_hidden_layers=4))
    assert c.layer_windows == (None, 64, 64, None) and (c.rope_theta, c.local_rope_theta) == (160000.0, 10000.0)
    assert c.modernbert == ModernBertLayout() and c.tie_word_embeddings and c.hidden_act == "gelu"
    c = ModelConfig.from_hf(transformers.ModernBertDecoderConfig(num_hidden_layers=3, global_rope_theta=5e4,
                                                                 local_rope_theta=2e4, local_attention=256))
    assert c.layer_windows == (None, 128, 128) and (c.rope_theta, c.local_rope_theta) == (5e4, 2e4)


def test_refusals():
    """Scaled rope, sliding layers without a window, an unknown layer type, an activation we do not run and a head_dim
    that is not hidden_size / num_attention_heads are refused at load."""
    import transformers

    def config(**kw):
        return transformers.ModernBertDecoderConfig(num_hidden_layers=3, architectures=["ModernBertDecoderForCausalLM"],
                                                    **kw)

    scaled = config()
    scaled.rope_parameters["full_attention"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    no_window = config(local_attention=1)      # HF's sliding_window: 1 // 2 = 0
    unknown = config()
    unknown.layer_types = ["full_attention", "chunked_attention", "full_attention"]
    head_dim = config()
    head_dim.head_dim = 32
    bad = [(scaled, "rope_parameters"), (no_window, "local_attention"), (unknown, "layer_types"),
           (config(hidden_activation="tanh"), "hidden_activation"),
           (config(classifier_activation="tanh"), "classifier_activation"), (head_dim, "head_dim")]
    for hf_config, match in bad:
        with pytest.raises(ValueError, match=match):
            ModelConfig.from_hf(hf_config)


def test_a_config_json_sliding_window_is_the_one_hf_runs():
    """HF's attention reads config.sliding_window, local_attention // 2 unless config.json names another."""
    import transformers

    base = transformers.ModernBertDecoderConfig(num_hidden_layers=3, local_attention=12,
                                                architectures=["ModernBertDecoderForCausalLM"])
    assert ModelConfig.from_hf(base).layer_windows == (None, 6, 6)
    named = transformers.ModernBertDecoderConfig.from_dict({**base.to_dict(), "sliding_window": 5})
    assert named.sliding_window == 5 and ModelConfig.from_hf(named).layer_windows == (None, 5, 5)
