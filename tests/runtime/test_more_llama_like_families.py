"""Ministral, Seed-OSS, ERNIE 4.5, EXAONE 4, Hunyuan dense and Arcee (llama_like_config.py, llama_like.py): what sets
each apart, against HF transformers on the same tiny random weights (logits_oracle.py; the common checks of every
family: test_family_logits.py, served: test_family_serving.py).

The tiny models (tests/tiny_models.py): Ministral and EXAONE 4 slide a window of 6 on layers 0 and 2 only, EXAONE 4
rotating q and k on those layers only; Seed-OSS has q/k/v biases without the o_proj one; ERNIE 4.5 rotates interleaved
pairs; Hunyuan normalises q and k after rope, with NTK-alpha rope (alpha 50); Arcee's MLP is up, relu^2, down.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import dataclasses
import json
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models import loader
from radixlm.runtime.models.loader import read_model_config

LENGTH = 26
ALL_FULL = ["full_attention"] * 3

# (arch, what is left out, config.json keys to set or ModelConfig fields to replace or a monkeypatch, value)
DIFFERENCES = [
    ("ministral", "windows", "json", {"layer_types": ALL_FULL}),
    ("ministral", "a full layer", "json", {"layer_types": ["sliding_attention"] * 3}),
    ("ernie4_5", "interleaved rope", "json", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}),
    ("exaone4", "NoPE on the full layer", "fields", {"nope_layers": ()}),
    ("exaone4", "windows", "json", {"sliding_window": 1000}),   # wider than the context: not enforced, NoPE stays
    ("exaone4", "the full layer", "json", {"layer_types": ["sliding_attention"] * 3}),
    ("hunyuan", "q/k norms after rope", "fields", {"qk_norm_after_rope": False}),
    ("hunyuan", "NTK alpha", "json", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    ("arcee", "the square of relu^2", "activation", torch.relu),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    """arch -> (path, token ids, HF's logits), each computed once."""
    import random

    from radixlm.runtime.models.loader import load_tokenizer

    cases = {}

    def get(arch):
        if arch not in cases:
            path = tiny_model(arch)
            ids = random.Random(21).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
            cases[arch] = (path, ids, HF(path)(ids))
        return cases[arch]
    return get


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    path, ids, ref = hf_logits(arch)
    folder = tmp_path / "variant"
    shutil.copytree(path, folder)
    if how == "json":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))
    elif how == "fields":
        read = loader.read_model_config
        monkeypatch.setattr(loader, "read_model_config", lambda p: dataclasses.replace(read(p), **change))
    else:
        from radixlm.runtime.models.llama_like import ReluSquaredMLP

        monkeypatch.setattr(ReluSquaredMLP, "activation", staticmethod(change))
    with pytest.raises(AssertionError):
        assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, f"without {left_out}")


def test_model_config_fields(tiny_model):
    ministral = read_model_config(tiny_model("ministral"))
    assert ministral.layer_windows == (6, None, 6) and ministral.nope_layers == () and ministral.context_length == 256
    seed = read_model_config(tiny_model("seed_oss"))
    assert seed.attention_bias and not seed.o_proj_bias and seed.head_dim == 32
    ernie = read_model_config(tiny_model("ernie4_5"))
    assert ernie.tie_word_embeddings and not ernie.attention_bias and ernie.rotary_dim is None
    exaone = read_model_config(tiny_model("exaone4"))
    assert exaone.qk_norm and not exaone.qk_norm_after_rope
    assert exaone.layer_windows == (6, None, 6) and exaone.nope_layers == (1,)
    hunyuan = read_model_config(tiny_model("hunyuan"))
    assert hunyuan.qk_norm and hunyuan.qk_norm_after_rope and hunyuan.attention_bias and hunyuan.o_proj_bias
    assert hunyuan.rope_theta == pytest.approx(10000.0 * 50.0 ** (16 / 14)) and hunyuan.rope_scaling is None
    arcee = read_model_config(tiny_model("arcee"))
    assert arcee.hidden_act == "relu2" and arcee.attention_bias and arcee.o_proj_bias


def test_exaone4_without_a_window_rotates_every_layer():
    from transformers import Exaone4Config

    from radixlm.runtime.models.config import ModelConfig

    config = ModelConfig.from_hf(Exaone4Config(num_hidden_layers=3, sliding_window=None, layer_types=ALL_FULL,
                                               architectures=["Exaone4ForCausalLM"]))
    assert config.nope_layers == () and config.layer_windows == ()


def test_seed_oss_reads_attention_out_bias(tiny_model, tmp_path):
    """attention_out_bias, not attention_bias, decides o_proj's bias: the checkpoint without one then lacks it."""
    folder = tmp_path / "seed"
    shutil.copytree(tiny_model("seed_oss"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_out_bias": True}))
    assert read_model_config(folder).o_proj_bias
    with pytest.raises(ValueError, match="missing"):
        loader.load_model(folder)


def test_unsupported_settings_get_a_clear_error(tiny_model):
    from transformers import ArceeConfig, Ernie4_5Config

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.gguf_weights import load_gguf_weights

    with pytest.raises(ValueError, match="use_bias"):
        ModelConfig.from_hf(Ernie4_5Config(use_bias=True, architectures=["Ernie4_5ForCausalLM"]))
    with pytest.raises(ValueError, match="relu2"):
        ModelConfig.from_hf(ArceeConfig(hidden_act="silu", architectures=["ArceeForCausalLM"]))
    with pytest.raises(ValueError, match="quantization fp8"):
        loader.load_model(tiny_model("arcee"), quantization="fp8")
    arcee, _ = loader.load_model(tiny_model("arcee"))
    assert arcee.enable_native_decode() is not None and arcee.native_decode is None
    for arch in ("ministral", "seed_oss"):   # Llama's layer: GGUF names of llama.cpp unverified for them
        model = Paged(tiny_model(arch), reference=True).model
        with pytest.raises(ValueError, match=f"{model.config.architecture}: GGUF"):
            load_gguf_weights(model, "never-read.gguf", "torch")
