"""GraniteSWA and GraniteMoeSWA (granite_swa.py, granite_swa_config.py), LFM3 (lfm3.py, lfm3_config.py), HRM-Text
(hrm_text.py, hrm_text_config.py), Dory (dory.py, dory_config.py), GPT-Neo (gpt2.py), CodeGen (gpt_neox.py), Persimmon
(persimmon.py), XGLM (xglm.py; the four gpt_config.py) and JetMoE (jetmoe.py, jetmoe_config.py): what sets each apart,
against HF transformers on the same tiny random weights (logits_oracle.py; GraniteSWA's common checks:
test_family_logits.py, served: test_family_serving.py), each served as prefills, a chunk beside a decode and decodes.

The tiny models (tests/tiny_d2_models.py): GraniteSWA's layer 0 full with rope base 10000, layer 1 sliding (window 6)
without rope, layer 2 sliding with rope base 100; a sink logit per query head; Granite's multipliers.  LFM3's
convolution, full layer (proportional rope: half the pairs at base 100, frequencies halved), sliding layer (window 6,
the default rope), convolution; sandwich norms and the gate per head.  HRM-Text's stacks of 2 layers in 2 high cycles
of 2 low ones, each run with its own KV layers; the gate on every output channel, z_L_init, embeddings x 3.  Dory's
input layer, two recurrent layers looped twice (each loop on its own KV layers), output layer; windows of 6 on the
sliding ones, a rope base per layer kind, nGPT's scales.  GPT-Neo's local layer (window 6) and unscaled scores;
CodeGen's q, v and k rows in each of 4 shards.  Persimmon's biased q/k LayerNorms and relu^2; XGLM's sinusoidal
positions and embeddings x 8.  JetMoE's attention experts (queries of 2 heads per chosen expert over 2 K/V heads
repeated whole) and SwiGLU experts, with biases.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import pytest
import torch
import torch.nn.functional as F
from logits_oracle import Paged, assert_close
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from tiny_more_dense import config_class

from radixlm.runtime.models import dory, gpt_layers, gpt_neox, hrm_text, jetmoe, lfm3, xglm
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.dory_config import DoryLoops
from radixlm.runtime.models.hrm_text_config import HrmCycles
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.models.parallel_block import ParallelAttention, layer_norm
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 26
_variants = AttentionBackend.set_layer_variants
_NO_SINKS = (AttentionBackend, "set_layer_variants",
             lambda self, windows, softcap=None, sinks=None, chunks=None: _variants(self, windows, softcap, None, chunks))

_rope = lfm3.proportional_cos_sin
_DORY_BASES = (1e4, 100.0, 1e4, 100.0)
# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("granite_swa", "the sinks", "attr", _NO_SINKS),
    ("granite_swa", "windows", "json", {"layer_types": ["full_attention"] * 3}),
    ("granite_swa", "the rope base per layer", "fields", {"layer_rope_thetas": ()}),
    ("granite_swa", "the layer without rope", "fields", {"nope_layers": ()}),
    ("lfm3", "the gate", "attr", (lfm3.Lfm3Attention, "gate", lambda self, o, x: o)),
    ("lfm3", "the sandwich norms", "attr", (lfm3.Lfm3Layer, "post_norm", lambda self, x, weight: x)),
    ("lfm3", "the window", "fields", {"layer_windows": (None,) * 4}),
    ("lfm3", "the pairs that do not rotate", "attr",
     (lfm3, "proportional_cos_sin", lambda base, fraction, factor, *shape: _rope(base, 1.0, factor, *shape))),
    ("lfm3", "the frequency divisor", "attr",
     (lfm3, "proportional_cos_sin", lambda base, fraction, factor, *shape: _rope(base, fraction, 1.0, *shape))),
    ("hrm_text", "the gate", "attr", (hrm_text.GatedAttention, "gate", lambda self, x: 1.0)),
    ("hrm_text", "z_L_init", "attr", (hrm_text.HrmTextForCausalLM, "initial_low_state", lambda self, z: 0 * z)),
    ("hrm_text", "a low cycle", "fields", {"hrm": HrmCycles(2, 2, 1)}),
    ("hrm_text", "the embedding scale", "fields", {"embedding_multiplier": 1.0}),
    ("dory", "a loop", "fields", {"dory": DoryLoops(1, 2, 1, 1, _DORY_BASES, 0.5, 2.0)}),
    ("dory", "the input re-injected each loop", "attr", (dory.DoryForCausalLM, "loop_input", lambda self, x, z: x)),
    ("dory", "the rope base per layer kind", "fields", {"dory": DoryLoops(1, 2, 1, 2, (1e4,) * 4, 0.5, 2.0)}),
    ("dory", "nGPT's scales", "fields", {"dory": DoryLoops(1, 2, 1, 2, _DORY_BASES, 0.25, 2.0)}),
    ("dory", "the windows", "fields", {"layer_windows": (None,) * 6}),
    ("gpt_neo", "the local window", "fields", {"layer_windows": ()}),
    ("gpt_neo", "unscaled scores", "fields", {"attention_multiplier": None}),
    ("codegen", "q, v and k rows per shard", "attr", (gpt_neox, "CODEGEN_SHARDS", 1)),
    ("persimmon", "the q/k LayerNorms' biases", "attr",
     (ParallelAttention, "norm_qk", lambda self, qk: layer_norm(qk, self.qk_norm, None, self.eps))),
    ("persimmon", "the square of relu^2", "attr", (gpt_layers, "ACTIVATIONS", {**gpt_layers.ACTIVATIONS, "relu2": F.relu})),
    ("xglm", "the sinusoidal positions", "attr", (xglm, "sinusoidal_positions", lambda rows, dim: torch.zeros(rows, dim))),
    ("xglm", "the embedding scale", "fields", {"embedding_multiplier": 1.0}),
    ("jetmoe", "the layers' own norm epsilon", "attr", (jetmoe, "LAYER_EPS", 1e-5)),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    get = hf_logits_cache(tiny_model, LENGTH)

    def logits(arch):
        if arch != "xglm":
            return get(arch)
        # HF's XGLM attention floors its scores with torch.full in the default dtype: float32's minimum overflows there
        # in its float64 run unless the default is float64
        torch.set_default_dtype(torch.float64)
        try:
            return get(arch)
        finally:
            torch.set_default_dtype(torch.float32)
    return logits


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", ["granitemoe_swa", "lfm3", "hrm_text", "dory", "gpt_neo", "codegen", "persimmon",
                                  "xglm", "jetmoe"])
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """As served (packed weights, experts, LFM3's convolution inputs carried per request row, HRM-Text's KV layer per
    run): two prefills in one step, a chunk beside a decode, then both rows decoding past the windows (one HF run:
    each row reads a prefix of its prompt)."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


@pytest.mark.parametrize("arch,shared", [("hrm_text", (HrmCycles, "slot", lambda self, high, low: 0)),
                                         ("dory", (DoryLoops, "slot", lambda self, layer, loop: layer))])
def test_kv_layer_per_run_matters(arch, shared, hf_logits, monkeypatch):
    """With every run of a layer writing the same KV layer, a decode step reads another run's keys."""
    path, ids, ref = hf_logits(arch)
    monkeypatch.setattr(*shared)
    paged = Paged(path, reference=True)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "a prefill reads its own keys")
    with pytest.raises(AssertionError):
        assert_close(paged.step([(0, [ids[20]])])[0], ref[20], "decode without a KV layer per run")


def test_jetmoe_kv_heads_repeated_whole_matters(hf_logits, monkeypatch):
    """JetMoE's query head s * Hkv + h reads K/V head h: run slot-major through the kernels' grouping, the logits
    leave the bound."""
    path, ids, ref = hf_logits("jetmoe")
    attention = jetmoe.MixtureOfAttention
    monkeypatch.setattr(attention, "to_kernel_heads", lambda self, q, T: q.reshape(T, -1, self.head_dim))
    monkeypatch.setattr(attention, "from_kernel_heads", lambda self, o, T: o.reshape(T * self.k, -1))
    with pytest.raises(AssertionError):
        assert_close(Paged(path, reference=True).step([(0, ids)]), ref, "query heads slot-major in the kernels")


def test_model_config_fields(tiny_model):
    for arch in ("granite_swa", "granitemoe_swa"):
        c = read_model_config(tiny_model(arch))
        assert c.layer_windows == (None, 6, 6) and c.nope_layers == (1,) and c.layer_rope_thetas == (1e4, 0.0, 100.0)
        assert c.attention_bias and c.o_proj_bias and c.embedding_multiplier == 6.0 and c.logits_scaling == 4.0
    moe = read_model_config(tiny_model("granitemoe_swa")).moe
    assert moe.shared_expert_intermediate_size == 48 and not moe.shared_expert_gate and moe.num_experts == 8
    c = read_model_config(tiny_model("lfm3"))
    sc = c.short_conv
    assert sc.conv_layers == (0, 3) and c.kv_layers == 2 and c.layer_windows == (None, None, 6, None)
    assert sc.layer_ropes == (None, (100.0, 0.5, 2.0), (10000.0, 1.0, 1.0), None) and sc.bias and sc.conv_kernel == 3
    assert sc.sandwich_norms and sc.attention_gate and c.intermediate_size == 96 and c.o_proj_bias
    c = read_model_config(tiny_model("hrm_text"))
    assert c.hrm == HrmCycles(2, 2, 2) and c.num_layers == c.kv_layers == 12 and c.num_kv_heads == c.num_heads == 4
    assert c.embedding_multiplier == 3.0 and c.attention_bias and c.o_proj_bias and c.mlp_bias
    c = read_model_config(tiny_model("dory"))
    assert c.dory == DoryLoops(1, 2, 1, 2, _DORY_BASES, 0.5, 2.0) and c.num_layers == c.kv_layers == 6
    assert c.layer_windows == (6, None, 6, None, None, 6) and c.rms_norm_eps == 1e-6
    c = read_model_config(tiny_model("jetmoe"))
    assert (c.num_heads, c.num_kv_heads, c.head_dim, c.rms_norm_eps) == (4, 2, 16, 1e-5)
    assert (c.moe.num_experts, c.moe.top_k, c.moe.intermediate_size) == (8, 2, 32)


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


def test_hrm_text_refusal():
    """num_hidden_layers must count one KV layer per run of each layer."""
    config = config_class("HrmTextConfig")(num_hidden_layers=2, H_cycles=2, L_cycles=2,
                                           architectures=["HrmTextForCausalLM"])
    config.num_hidden_layers = 8
    with pytest.raises(ValueError, match="num_hidden_layers 8"):
        ModelConfig.from_hf(config)


def test_dory_released_names_and_refusal():
    """The released layout's names as transformers reads them; the last_loop KV mode is refused."""
    assert dory.hf_name("backbone.layers.2.mixer.g_proj.weight") == "model.layers.1.self_attn.gate_proj.weight"
    assert dory.hf_name("backbone.layers.3.mixer.suv_up") == "model.layers.1.mlp.suv_up"
    assert dory.hf_name("backbone.layers.3.mlp_alpha") == "model.layers.1.lambda_2"
    assert dory.hf_name("backbone.embeddings.weight") == "model.embed_tokens.weight"
    config = config_class("DoryConfig")(num_hidden_layers=4, n_input_layers=1, n_output_layers=1,
                                        recurrent_kv_cache_mode="last_loop", architectures=["DoryForCausalLM"])
    with pytest.raises(ValueError, match="recurrent_kv_cache_mode"):
        ModelConfig.from_hf(config)


def test_classic_refusals():
    """CodeGen's rope over the whole hidden size (rotary_dim None) or heads that do not split over its 4 shards, and
    an XGLM pad_token_id whose zeroed sinusoidal row a position would read, are refused."""
    import transformers

    config = transformers.XGLMConfig(num_layers=1, d_model=64, attention_heads=4, pad_token_id=5,
                                     architectures=["XGLMForCausalLM"])
    with pytest.raises(ValueError, match="pad_token_id 5"):
        ModelConfig.from_hf(config)

    for fields, match in (({"rotary_dim": None}, "rotary_dim"), ({"n_head": 6, "n_embd": 48}, "n_head 6")):
        config = transformers.CodeGenConfig(n_layer=1, n_embd=64, n_head=4, architectures=["CodeGenForCausalLM"])
        for field, value in fields.items():   # rotary_dim None: as an older config without it
            object.__setattr__(config, field, value)
        with pytest.raises(ValueError, match=match):
            ModelConfig.from_hf(config)


def test_lfm3_refusals():
    """A rope type LFM3's layers do not run, and the default rope on part of a head, are refused."""
    cls = config_class("Lfm3Config")
    for full in ({"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e6},
                 {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}):
        ropes = {"full_attention": full, "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
        config = cls(num_hidden_layers=4, architectures=["Lfm3ForCausalLM"])
        config.rope_parameters = ropes
        with pytest.raises(ValueError, match=r"rope_parameters\['full_attention'\]"):
            ModelConfig.from_hf(config)
