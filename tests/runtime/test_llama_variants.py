"""Granite and SmolLM3 (llama.py's model with ModelConfig fields set): what sets them apart, against HF transformers
on the same tiny random weights (logits_oracle.py; the common checks of every family: test_family_logits.py,
served: test_family_serving.py).

Granite's tiny model has every multiplier far from 1: embeddings x6, each sublayer's output x0.3 before it joins the
residual stream, scores scaled by 0.7 (head_dim's would be 0.25), logits / 4.  SmolLM3's rotates q and k on layers
0 and 2 but not on layer 1 (NoPE).  test_each_difference_matters proves the oracle notices any one of them left out.
"""

import json
import shutil

import pytest
from logits_oracle import Paged, assert_close, family_case

from radixlm.runtime.models.loader import read_model_config

FAMILIES = ("granite", "smollm3")
LENGTH = 30


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


NEUTRAL = {"granite": [{"embedding_multiplier": 1.0}, {"residual_multiplier": 1.0},
                       {"attention_multiplier": 0.25}, {"logits_scaling": 1.0}],   # 0.25: head_dim 16's scale
           "smollm3": [{"no_rope_layers": [1, 1, 1]}, {"no_rope_layers": [0, 0, 0]}]}


def test_each_difference_matters(fam, tmp_path):
    """The same weights loaded with one multiplier made neutral, or rope on every layer or none, leave the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    for i, change in enumerate(NEUTRAL[arch]):
        folder = tmp_path / f"variant-{i}"
        shutil.copytree(path, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(AssertionError):
            assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, f"with {change}")


def test_model_config_fields(tiny_model):
    granite = read_model_config(tiny_model("granite"))
    assert (granite.embedding_multiplier, granite.residual_multiplier, granite.logits_scaling) == (6.0, 0.3, 4.0)
    assert granite.sm_scale == 0.7 and granite.o_proj_bias and granite.nope_layers == ()
    smollm3 = read_model_config(tiny_model("smollm3"))
    assert smollm3.nope_layers == (1,) and smollm3.o_proj_bias and smollm3.sm_scale == 16 ** -0.5
    assert (smollm3.embedding_multiplier, smollm3.residual_multiplier, smollm3.logits_scaling) == (1.0, 1.0, 1.0)
    assert smollm3.sliding_window is None and smollm3.context_length == 256


def test_smollm3_sliding_window_only_when_used():
    """HF windows a layer only with use_sliding_window (then its NoPE layers, by default); the kernels enforce it, so
    the context is not capped (logits against HF: test_config_variants.py)."""
    from transformers import SmolLM3Config

    from radixlm.runtime.models.config import ModelConfig

    kw = dict(num_hidden_layers=4, sliding_window=16, max_position_embeddings=256, architectures=["SmolLM3ForCausalLM"])
    unused = ModelConfig.from_hf(SmolLM3Config(**kw))
    assert unused.sliding_window is None and not unused.layer_windows and unused.nope_layers == (3,)
    used = ModelConfig.from_hf(SmolLM3Config(use_sliding_window=True, **kw))
    assert used.layer_windows == (None, None, None, 16) and used.context_length == 256


def test_unsupported_settings_get_a_clear_error(tiny_model):
    from transformers import GraniteConfig, SmolLM3Config

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.gguf_weights import load_gguf_weights

    assert ModelConfig.from_hf(GraniteConfig(mlp_bias=True, architectures=["GraniteForCausalLM"])).mlp_bias  # llama.py's
    with pytest.raises(ValueError, match="no_rope_layers"):
        ModelConfig.from_hf(SmolLM3Config(num_hidden_layers=4, no_rope_layers=[1, 0], layer_types=["full_attention"] * 4,
                                          architectures=["SmolLM3ForCausalLM"]))
    model = Paged(tiny_model("granite"), reference=True).model
    with pytest.raises(ValueError, match="GraniteForCausalLM: GGUF"):
        load_gguf_weights(model, "never-read.gguf", "torch")
