"""Ministral, Seed-OSS, ERNIE 4.5, EXAONE 4, Hunyuan dense, Arcee, GLM-4 (2024), Helium, Nemotron, OLMo, Apertus,
NanoChat, VaultGemma and Llama's mlp_bias (llama_like_config.py, llama_like.py, glm4.py, nemotron.py, olmo.py,
gemma.py): what sets each apart, against HF transformers on the same tiny random weights (logits_oracle.py; the common
checks of every family: test_family_logits.py, served: test_family_serving.py).

The tiny models (tests/tiny_models.py): Ministral and EXAONE 4 slide a window of 6 on layers 0 and 2 only, EXAONE 4
rotating q and k on those layers only; Seed-OSS has q/k/v biases without the o_proj one; ERNIE 4.5 rotates interleaved
pairs; Hunyuan normalises q and k after rope, with NTK-alpha rope (alpha 50); Arcee's MLP is up, relu^2, down.
GLM-4 (2024) rotates the first half of each head in interleaved pairs, Helium all of it; Nemotron's LayerNorms add 1 to
their weights, 4 of its 16 head dims rotate; OLMo clamps q/k/v to +-0.4; Apertus's MLP is up, xIELU, down; Llama
with mlp_bias has biases on gate, up and down; VaultGemma is Gemma 2 (windows of 8 on layers 0 and 2, soft-caps) with
pre-norms only; NanoChat has weightless norms, its embeddings normalised, rope the other way round and logits capped
at 3.  These three run outside the common checks (tiny_models.TINY_VARIANT_ARCHS): prefill and decode here.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import json
import shutil

import pytest
import torch
from logits_oracle import Paged, assert_close
from paged_checks import check_difference_left_out, hf_logits_cache
from tiny_models import TINY_VARIANT_ARCHS

from radixlm.runtime.models import llama_like, loader, nemotron
from radixlm.runtime.models.glm4 import GlmForCausalLM
from radixlm.runtime.models.layer_ops import silu_mul
from radixlm.runtime.models.llama import LlamaForCausalLM, LlamaMLP
from radixlm.runtime.models.llama_like import (
    HeliumForCausalLM,
    NanoChatForCausalLM,
    ReluSquaredMLP,
    RenamedCheckpoint,
    XieluMLP,
)
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.packed_linear import linear

LENGTH = 26
ALL_FULL = ["full_attention"] * 3

# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("ministral", "windows", "json", {"layer_types": ALL_FULL}),
    ("ministral", "a full layer", "json", {"layer_types": ["sliding_attention"] * 3}),
    ("ernie4_5", "interleaved rope", "json", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}),
    ("exaone4", "NoPE on the full layer", "fields", {"nope_layers": ()}),
    ("exaone4", "windows", "json", {"sliding_window": 1000}),   # wider than the context: not enforced, NoPE stays
    ("exaone4", "the full layer", "json", {"layer_types": ["sliding_attention"] * 3}),
    ("hunyuan", "q/k norms after rope", "fields", {"qk_norm_after_rope": False}),
    ("hunyuan", "NTK alpha", "json", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    ("arcee", "the square of relu^2", "attr", (ReluSquaredMLP, "activation", staticmethod(torch.relu))),
    ("glm", "interleaved rope", "attr", (GlmForCausalLM, "checkpoint_tensors", LlamaForCausalLM.checkpoint_tensors)),
    ("glm", "partial rotary", "fields", {"rotary_dim": None}),
    ("helium", "interleaved rope", "attr",
     (HeliumForCausalLM, "checkpoint_tensors", LlamaForCausalLM.checkpoint_tensors)),
    ("nemotron", "the 1 of LayerNorm1P", "attr",
     (nemotron, "layer_norm_1p", lambda x, w, b, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps))),
    ("nemotron", "partial rotary", "fields", {"rotary_dim": None}),
    ("olmo", "clip_qkv", "fields", {"clip_qkv": None}),
    ("apertus", "xIELU", "attr", (XieluMLP, "activation", staticmethod(ReluSquaredMLP.activation))),
    ("vaultgemma", "windows", "json", {"sliding_window": 1000}),
    ("nanochat", "rope's direction", "attr",
     (NanoChatForCausalLM, "checkpoint_tensors", RenamedCheckpoint.checkpoint_tensors)),
    ("nanochat", "the embeddings' norm", "attr", (llama_like, "rms_norm", lambda x, weight, eps: x)),
    ("nanochat", "the logits' soft-cap", "fields", {"final_softcap": None}),
    ("llama_mlp_bias", "MLP biases", "attr",
     (LlamaMLP, "forward", lambda self, x: linear(silu_mul(linear(x, self.gate_up_proj)), self.down_proj))),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


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


@pytest.mark.parametrize("arch", TINY_VARIANT_ARCHS)
def test_variant_prefill_and_decode(arch, hf_logits):
    """Llama's layer with mlp_bias, VaultGemma and NanoChat as served (packed weights, op by op), decoding across the windows."""
    path, ids, ref = hf_logits(arch)
    paged = Paged(path)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "prefill")
    for i in range(20, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"decode at {i}")


def test_dense_family_fields(tiny_model):
    glm = read_model_config(tiny_model("glm"))
    assert glm.rotary_dim == 16 and glm.head_dim == 32 and glm.attention_bias and not glm.o_proj_bias
    helium = read_model_config(tiny_model("helium"))
    assert helium.rotary_dim is None and helium.attention_bias and not helium.o_proj_bias and not helium.mlp_bias
    nemo = read_model_config(tiny_model("nemotron"))
    assert nemo.rotary_dim == 4 and nemo.hidden_act == "relu2" and nemo.mlp_bias and nemo.o_proj_bias
    olmo = read_model_config(tiny_model("olmo"))
    assert olmo.clip_qkv == 0.4 and olmo.attention_bias and olmo.o_proj_bias and olmo.rms_norm_eps == 1e-5
    apertus = read_model_config(tiny_model("apertus"))
    assert apertus.hidden_act == "xielu" and apertus.qk_norm and apertus.o_proj_bias
    assert apertus.rope_scaling["rope_type"] == "llama3"
    assert read_model_config(tiny_model("llama_mlp_bias")).mlp_bias
    vault = read_model_config(tiny_model("vaultgemma"))
    assert vault.layer_windows == (8, None, 8) and vault.attn_softcap == 2.0 and vault.query_pre_attn_scalar == 24


def test_dense_family_refusals(tiny_model):
    from transformers import ApertusConfig, MistralConfig, NanoChatConfig, NemotronConfig, OlmoConfig

    from radixlm.runtime.models.config import ModelConfig

    with pytest.raises(ValueError, match="hidden_act='silu'"):
        ModelConfig.from_hf(NemotronConfig(hidden_act="silu", architectures=["NemotronForCausalLM"]))
    with pytest.raises(ValueError, match="hidden_act='silu'"):
        ModelConfig.from_hf(ApertusConfig(hidden_act="silu", architectures=["ApertusForCausalLM"]))
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        ModelConfig.from_hf(NanoChatConfig(tie_word_embeddings=True, architectures=["NanoChatForCausalLM"]))
    with pytest.raises(ValueError, match="clip_qkv"):
        ModelConfig.from_hf(OlmoConfig(clip_qkv=0.0, architectures=["OlmoForCausalLM"]))
    with pytest.raises(ValueError, match="mlp_bias"):   # a family whose HF MLP has no biases
        ModelConfig.from_hf(MistralConfig(mlp_bias=True, architectures=["MistralForCausalLM"]))
    with pytest.raises(ValueError, match="mlp_bias"):
        loader.load_model(tiny_model("llama_mlp_bias"))[0].enable_tensor_parallel(object())
    # partial rotary, own layers, a non-gated MLP, MLP biases
    for arch in ("glm", "nemotron", "olmo", "apertus", "llama_mlp_bias", "nanochat"):
        model, _ = loader.load_model(tiny_model(arch))
        assert model.enable_native_decode() is not None and model.native_decode is None
    for arch in ("nemotron", "apertus"):
        with pytest.raises(ValueError, match="quantization fp8"):
            loader.load_model(tiny_model(arch), quantization="fp8")
