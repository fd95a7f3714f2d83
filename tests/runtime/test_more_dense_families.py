"""Cohere 2, CWM, Jais 2, HyperCLOVA X and DiffLlama (more_dense_config.py, cohere.py, llama_like.py, nemotron.py,
hyperclovax.py, diffllama.py): what sets each apart, against HF transformers on the same tiny random weights
(logits_oracle.py; the common checks of every family: test_family_logits.py, served: test_family_serving.py).

The tiny models (tests/tiny_more_dense.py): Cohere 2 slides a window of 6 on layers 0 and 2, which alone rotate q and k
(interleaved), and multiplies its logits by 4; CWM's layer 0 is full and layers 1 and 2 slide a window of 6, with
llama3 rope from position 32; Jais 2 has LayerNorms with biases and a relu^2 MLP; HyperCLOVA X has Granite's
multipliers, its logits multiplied (not divided) by 4 and an RMSNorm on each sublayer's output; DiffLlama subtracts a
second attention map (8 query heads over 4 KV heads, each map reading its half of the value heads) scaled by its learned
lambda, then normalises each head pair.
test_each_difference_matters proves the oracle notices any one of them left out.  CWM and Jais 2 run outside the common
checks (tiny_more_dense.COMMON_CHECK_ARCHS): prefill and decode across the windows here.
"""


import pytest
import torch
import torch.nn.functional as F
from logits_oracle import HF, Paged, assert_close
from paged_checks import check_difference_left_out, hf_logits_cache
from tiny_models import save_tiny_model
from tiny_more_dense import config_class

from radixlm.runtime.models import diffllama, layernorm_model, loader
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.diffllama import DiffLlamaAttention
from radixlm.runtime.models.hyperclovax import HyperCLOVAXDecoderLayer
from radixlm.runtime.models.llama_like import ReluSquaredMLP
from radixlm.runtime.models.loader import read_model_config

LENGTH = 26

# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("cohere2", "NoPE on the full layer", "fields", {"nope_layers": ()}),
    ("cohere2", "rope on the sliding layers", "fields", {"nope_layers": (0, 1, 2)}),
    ("cohere2", "windows", "json", {"sliding_window": 1000}),   # wider than the context: not enforced, NoPE stays
    ("cohere2", "the logit scale", "fields", {"logit_scale": None}),
    ("cwm", "windows", "json", {"layer_types": ["full_attention"] * 3}),
    ("cwm", "llama3 rope", "json", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    ("jais2", "the LayerNorms' biases", "attr",
     (layernorm_model.LayerNorm, "forward", lambda self, x: F.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps))),
    ("jais2", "the square of relu^2", "attr", (ReluSquaredMLP, "activation", staticmethod(torch.relu))),
    ("hyperclovax", "the post-norms", "attr", (HyperCLOVAXDecoderLayer, "post_norm", lambda self, x, weight: x)),
    ("hyperclovax", "logits multiplied, not divided", "fields", {"logits_scaling": 4.0}),
    ("diffllama", "the second map", "attr", (DiffLlamaAttention, "lambda_full", lambda self, dtype: 0.0)),
    ("diffllama", "lambda's learned part", "attr",
     (DiffLlamaAttention, "lambda_full", lambda self, dtype: self.lambda_init)),
    ("diffllama", "the group norm", "attr", (diffllama, "group_norm", lambda x, eps: x)),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", ["cwm", "jais2"])
def test_prefill_and_decode(arch, hf_logits):
    """CWM and Jais 2 as served (packed weights, op by op or the native decode), decoding across CWM's windows."""
    path, ids, ref = hf_logits(arch)
    paged = Paged(path)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "prefill")
    for i in range(20, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"decode at {i}")


def test_model_config_fields(tiny_model):
    cohere2 = read_model_config(tiny_model("cohere2"))
    assert cohere2.layer_windows == (6, None, 6) and cohere2.nope_layers == (1,) and cohere2.logit_scale == 4.0
    assert cohere2.tie_word_embeddings and cohere2.attention_bias and cohere2.o_proj_bias and not cohere2.qk_norm
    cwm = read_model_config(tiny_model("cwm"))
    assert cwm.layer_windows == (None, 6, 6) and cwm.nope_layers == () and cwm.rope_scaling["rope_type"] == "llama3"
    assert cwm.mlp_bias and not cwm.attention_bias and not cwm.o_proj_bias
    jais2 = read_model_config(tiny_model("jais2"))
    assert jais2.hidden_act == "relu2" and jais2.mlp_bias and jais2.attention_bias and jais2.o_proj_bias
    hcx = read_model_config(tiny_model("hyperclovax"))
    assert hcx.sublayer_post_norms and hcx.logits_scaling == 0.25 and hcx.embedding_multiplier == 6.0
    assert hcx.residual_multiplier == 0.3 and hcx.attention_multiplier == 0.7 and hcx.o_proj_bias
    diff = read_model_config(tiny_model("diffllama"))   # the kernels' heads: twice the checkpoint's
    assert (diff.num_heads, diff.num_kv_heads, diff.head_dim) == (16, 8, 8) and diff.o_proj_bias
    assert diff.sm_scale == 8 ** -0.5


def test_default_layer_patterns():
    """Cohere 2 without layer_types slides on three layers of four; without a sliding_window no layer rotates (HF
    rotates where a layer has a window).  CWM's defaults: full attention on every fourth layer from 0, llama3 rope."""
    arch = {"architectures": ["Cohere2ForCausalLM"]}
    cohere2 = ModelConfig.from_hf(config_class("Cohere2Config")(num_hidden_layers=8, max_position_embeddings=8192,
                                                                sliding_window=4096, **arch))
    assert cohere2.layer_windows == (4096, 4096, 4096, None) * 2 and cohere2.nope_layers == (3, 7)
    unwindowed = ModelConfig.from_hf(config_class("Cohere2Config")(num_hidden_layers=4, sliding_window=None, **arch))
    assert unwindowed.layer_windows == () and unwindowed.nope_layers == (0, 1, 2, 3)
    cwm = ModelConfig.from_hf(config_class("CwmConfig")(num_hidden_layers=5, architectures=["CwmForCausalLM"]))
    assert cwm.layer_windows == (None, 8192, 8192, 8192, None) and cwm.rope_scaling["rope_type"] == "llama3"


def test_hyperclovax_without_post_norms(tmp_path_factory):
    """use_post_norm=False: Granite's layer (HF's Identity post-norms), logits still multiplied."""
    from tiny_models import make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    config = config_class("HyperCLOVAXConfig")(
        num_hidden_layers=2, use_post_norm=False, vocab_size=len(tok), hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=2, embedding_multiplier=6.0, residual_multiplier=0.3,
        logits_scaling=4.0, max_position_embeddings=64, eos_token_id=tok.eos_token_id, bos_token_id=None,
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    path = save_tiny_model(tmp_path_factory, config, "tiny-hyperclovax-pre-norm", tok, seed=7)
    assert not read_model_config(path).sublayer_post_norms
    ids = list(range(3, 3 + 20))
    assert_close(Paged(path, reference=True).step([(0, ids)]), HF(path)(ids), "without post-norms")


def test_refusals(tiny_model):
    with pytest.raises(ValueError, match="hidden_act='silu'"):
        ModelConfig.from_hf(config_class("Jais2Config")(hidden_act="silu", architectures=["Jais2ForCausalLM"]))
    with pytest.raises(ValueError, match="num_key_value_heads"):
        ModelConfig.from_hf(config_class("DiffLlamaConfig")(hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
                                                            architectures=["DiffLlamaForCausalLM"]))
    with pytest.raises(ValueError, match="logits_scaling"):
        ModelConfig.from_hf(config_class("HyperCLOVAXConfig")(logits_scaling=0.0,
                                                              architectures=["HyperCLOVAXForCausalLM"]))
    for arch in ("cwm", "jais2"):   # outside the common checks: their refusals here
        with pytest.raises(ValueError, match="tensor parallelism"):
            loader.load_model(tiny_model(arch))[0].enable_tensor_parallel(object())
        with pytest.raises(ValueError, match="GGUF"):
            loader.load_model(tiny_model(arch), gguf="never-read.gguf")
    for arch in ("jais2", "hyperclovax", "diffllama"):   # own layers; post-norms; differential attention
        model, _ = loader.load_model(tiny_model(arch))
        assert model.enable_native_decode() is not None and model.native_decode is None
    for arch in ("jais2", "diffllama"):
        with pytest.raises(ValueError, match="quantization fp8"):
            loader.load_model(tiny_model(arch), quantization="fp8")
