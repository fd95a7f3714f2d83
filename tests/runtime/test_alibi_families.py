"""BLOOM and MPT (alibi.py, alibi_config.py): ALiBi's per-head linear biases in place of positions; GPT-1, BioGPT and
CTRL (early_gpt.py, early_gpt_config.py).  Against HF transformers on the same tiny random weights (logits_oracle.py),
through the paged pool as the server runs them on a CPU (the native kernels hand ALiBi layers to the torch reference),
with the torch reference alone, and (BLOOM, MPT) with the Triton kernels under the interpreter (in a subprocess, so
TRITON_INTERPRET does not leak); served greedily through the real runner and scheduler (radix cache hits included).

The tiny models (tests/tiny_alibi_models.py) have 6 heads: slopes from 1/2 to 1/256, with the two heads past the
largest power of two taking BLOOM's (and MPT's) own interleaved slopes.  BLOOM's LayerNorm on the word embeddings
and its per-head fused query_key_value; MPT's clip_qkv (0.5) and softmax_scale (0.5).  GPT-1's post-norms, learned
positions and tanh gelu; BioGPT's embedding scale and position offset; CTRL's own sinusoids and embedding scale.
test_each_difference_matters proves the oracle notices any one of them left out.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paged_checks import (
    FamilyCases,
    check_chunked_prefill,
    check_decode_pair,
    check_difference_left_out,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_reference_kernels,
    check_triton_backend,
    hf_logits_cache,
)
from scheduler_harness import assert_greedy_serving_matches_hf

from radixlm.runtime.models import alibi, early_gpt, opt, xglm
from radixlm.runtime.models.alibi_config import bloom_slopes, mpt_slopes
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gpt_config import GptLayout
from radixlm.runtime.models.gpt_layers import GptForCausalLM, GptLayer
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 26
ALIBI_ARCHS = ("bloom", "mpt")
ARCHS = ALIBI_ARCHS + ("openai_gpt", "biogpt", "ctrl", "gpt_neox_japanese")
CASES = FamilyCases({"bloom": "BloomConfig", "mpt": "MptConfig", "openai_gpt": "OpenAIGPTConfig",
                     "biogpt": "BioGptConfig", "ctrl": "CTRLConfig", "gpt_neox_japanese": "GPTNeoXJapaneseConfig"},
                    LENGTH)
_variants = AttentionBackend.set_layer_variants
_NO_ALIBI = (AttentionBackend, "set_layer_variants",
             lambda self, windows, softcap=None, sinks=None, chunks=None, alibi=None: _variants(self, windows))


_japanese_load = early_gpt.GPTNeoXJapaneseForCausalLM.load_weights


def _without_dense_bias(self, named_tensors):
    """GPT-NeoX-Japanese's weights with its last layer's dense_bias zeroed after loading."""
    _japanese_load(self, named_tensors)
    self.layers[-1].self_attn.o_bias.data.zero_()


# (arch, what is left out, how: "fields" ModelConfig fields to replace or "attr" an attribute to monkeypatch, value)
DIFFERENCES = [
    ("bloom", "ALiBi", "attr", _NO_ALIBI),
    ("bloom", "the slopes of the heads past 4 (a geometric run over 6)", "fields",
     {"alibi_slopes": tuple(2.0 ** (-8.0 * k / 6) for k in range(1, 7))}),
    ("bloom", "the word-embedding LayerNorm", "attr",
     (alibi.BloomForCausalLM, "embed_inputs", lambda self, fb: GptForCausalLM.embed_inputs(self, fb))),
    ("bloom", "q, k and v rows per head", "attr", (alibi.BloomForCausalLM, "PER_HEAD_QKV", False)),
    ("mpt", "ALiBi", "attr", _NO_ALIBI),
    ("mpt", "the slopes of 8 heads not interleaved", "fields", {"alibi_slopes": mpt_slopes(8)[:6]}),
    ("mpt", "clip_qkv", "fields", {"clip_qkv": None}),
    ("mpt", "softmax_scale", "fields", {"attention_multiplier": None}),
    ("openai_gpt", "the post-norms", "attr", (opt, "PostNormGptLayer", GptLayer)),
    ("openai_gpt", "the learned positions", "attr",
     (early_gpt.OpenAIGPTLMHeadModel, "position_embeddings", lambda self, fb: 0)),
    ("openai_gpt", "the tanh gelu", "fields", {"hidden_act": "gelu"}),
    ("biogpt", "the embedding scale", "fields", {"embedding_multiplier": 1.0}),
    ("biogpt", "the position offset", "fields", {"gpt": GptLayout(positions=66)}),
    ("ctrl", "the sinusoidal positions", "attr",
     (early_gpt.CTRLLMHeadModel, "position_table", lambda self, rows, dim: torch.zeros(rows, dim))),
    ("ctrl", "CTRL's own table (XGLM's in its place)", "attr",
     (early_gpt.CTRLLMHeadModel, "position_table", lambda self, rows, dim: xglm.sinusoidal_positions(rows, dim))),
    ("ctrl", "the embedding scale", "fields", {"embedding_multiplier": 1.0}),
    ("gpt_neox_japanese", "the last layer's output bias", "attr",
     (early_gpt.GPTNeoXJapaneseForCausalLM, "load_weights", _without_dense_bias)),
    ("gpt_neox_japanese", "the partial rope", "fields", {"rotary_dim": None}),
]


@pytest.fixture(params=ARCHS)
def fam(request, tiny_model):
    return CASES(request.param, tiny_model)


def test_prefill_single_and_batch(fam):
    check_prefill_single_and_batch(fam)


def test_extend_on_a_cached_prefix(fam):
    check_extend_on_a_cached_prefix(fam, prefix=17)


def test_chunked_prefill(fam):
    check_chunked_prefill(fam, chunk=5)


def test_decode_batch_of_two(fam):
    check_decode_pair(fam, start_a=5, start_b=7)


def test_mixed_step(fam):
    check_mixed_step(fam, a=20, b=15)


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    check_reference_kernels(fam, prefill=12, monkeypatch=monkeypatch)


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


_TRITON_RUN = """
import sys
sys.path[:0] = [{tests!r}, {runtime!r}]
from logits_oracle import family_case
from paged_checks import check_triton_backend
for arch, path in {paths!r}:
    check_triton_backend(family_case(arch, path, {length}), "cpu", split=23)
"""


def test_triton_backend_under_the_interpreter(tiny_model):
    """Both ALiBi models over the Triton kernels (the CUDA path) under TRITON_INTERPRET=1 in a subprocess: a prefill of 23
    tokens, then decode steps, against HF."""
    pytest.importorskip("triton")
    here = Path(__file__).resolve().parent
    paths = [(arch, str(tiny_model(arch))) for arch in ALIBI_ARCHS]
    code = _TRITON_RUN.format(tests=str(here.parent), runtime=str(here), paths=paths, length=LENGTH)
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(fam):
    """Every model over the compiled Triton kernels (float32 on CUDA against HF's float64 on the CPU)."""
    check_triton_backend(fam, "cuda", split=22)


@pytest.mark.parametrize("arch", ARCHS)
def test_served_greedily_as_hf_generates(arch, tiny_model):
    """Through the scheduler in chunks of 8, the third request's prompt from the radix cache."""
    assert_greedy_serving_matches_hf(tiny_model(arch))


def test_slopes_are_hf_own():
    """BLOOM's and MPT's slopes for 6, 8 and 12 heads as HF computes them."""
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for heads in (6, 8, 12):
        assert bloom_slopes(heads) == pytest.approx(_get_alibi_slopes(heads, "cpu").tolist(), rel=1e-6)
        assert mpt_slopes(heads) == pytest.approx((-build_mpt_alibi_tensor(heads, 2)[:, 0, 0]).tolist(), rel=1e-6)


@pytest.mark.parametrize("field,value", [("alibi_bias_max", 4), ("qk_ln", True), ("alibi", False),
                                         ("attn_uses_sequence_id", True)])
def test_mpt_options_hf_ignores_are_refused(field, value):
    from transformers import MptConfig

    config = MptConfig(n_layers=1, d_model=32, n_heads=4, attn_config={field: value}, architectures=["MptForCausalLM"])
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(config)


def test_bloom_residual_after_the_norm_is_refused():
    from transformers import BloomConfig

    config = BloomConfig(apply_residual_connection_post_layernorm=True, architectures=["BloomForCausalLM"])
    with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm"):
        ModelConfig.from_hf(config)
