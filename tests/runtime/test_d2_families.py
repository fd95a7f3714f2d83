"""GraniteSWA and GraniteMoeSWA (granite_swa.py, granite_swa_config.py): what sets each apart, against HF transformers on
the same tiny random weights (logits_oracle.py; GraniteSWA's common checks: test_family_logits.py, served:
test_family_serving.py).

The tiny models (tests/tiny_d2_models.py): layer 0 full with rope base 10000, layer 1 sliding (window 6) without rope,
layer 2 sliding with rope base 100; a sink logit per query head; Granite's multipliers.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import pytest
from logits_oracle import Paged, assert_close
from paged_checks import check_difference_left_out, hf_logits_cache
from tiny_more_dense import config_class

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 26
_variants = AttentionBackend.set_layer_variants
_NO_SINKS = (AttentionBackend, "set_layer_variants",
             lambda self, windows, softcap=None, sinks=None, chunks=None: _variants(self, windows, softcap, None, chunks))

# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("granite_swa", "the sinks", "attr", _NO_SINKS),
    ("granite_swa", "windows", "json", {"layer_types": ["full_attention"] * 3}),
    ("granite_swa", "the rope base per layer", "fields", {"layer_rope_thetas": ()}),
    ("granite_swa", "the layer without rope", "fields", {"nope_layers": ()}),
    ("granitemoe_swa", "the sinks", "attr", _NO_SINKS),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


def test_granitemoe_swa_prefill_and_decode(hf_logits):
    """GraniteMoeSWA as served (packed weights and experts), decoding across the windows."""
    path, ids, ref = hf_logits("granitemoe_swa")
    paged = Paged(path)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "prefill")
    for i in range(20, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"decode at {i}")


def test_model_config_fields(tiny_model):
    for arch in ("granite_swa", "granitemoe_swa"):
        c = read_model_config(tiny_model(arch))
        assert c.layer_windows == (None, 6, 6) and c.nope_layers == (1,) and c.layer_rope_thetas == (1e4, 0.0, 100.0)
        assert c.attention_bias and c.o_proj_bias and c.embedding_multiplier == 6.0 and c.logits_scaling == 4.0
    moe = read_model_config(tiny_model("granitemoe_swa")).moe
    assert moe.shared_expert_intermediate_size == 48 and not moe.shared_expert_gate and moe.num_experts == 8


def test_defaults_and_refusals():
    """Without layer_types every fourth layer from 0 is full; without layer_rope_theta every layer rotates at the
    global base; layer_types or layer_rope_theta that do not give each layer a value are refused."""
    cls = config_class("GraniteSWAConfig")
    arch = {"architectures": ["GraniteSWAForCausalLM"]}
    c = ModelConfig.from_hf(cls(num_hidden_layers=5, sliding_window=128, **arch))
    assert c.layer_windows == (None, 128, 128, 128, None) and c.nope_layers == () and c.rope_theta == 10000.0
    assert set(c.layer_rope_thetas) == {10000.0}
    bad = cls(num_hidden_layers=2, **arch)
    bad.layer_rope_theta = [10000.0]
    with pytest.raises(ValueError, match="layer_rope_theta"):
        ModelConfig.from_hf(bad)
    bad = cls(num_hidden_layers=2, **arch)
    bad.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(ValueError, match="layer_types"):
        ModelConfig.from_hf(bad)
