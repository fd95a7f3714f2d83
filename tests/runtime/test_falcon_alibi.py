"""Falcon-RW (falcon-rw-1b's layout: Falcon with alibi, gpt_config._falcon, falcon.py) against HF transformers on the
same tiny random weights (logits_oracle.py, tests/tiny_falcon_alibi_models.py): HF's ALiBi biases are the bfloat16
product of the bfloat16 slope and the key position, divided by sqrt(head_dim), which the attention kernels emulate
(torch_ref.falcon_bias).  Prompts of 300 tokens, so that positions past 256 (which bfloat16 rounds to even) are
served: prefills, an extend on a cached prefix, chunks, decodes, a mixed step, the torch reference kernels and the
Triton kernels under the interpreter (in a subprocess, so TRITON_INTERPRET does not leak); served greedily through the
real runner and scheduler.  test_each_difference_matters proves the oracle notices the rounding of the product, the
rounding of the positions, the 1/sqrt(head_dim) and BLOOM's ALiBi in its place.
"""

import os
import subprocess
import sys
from pathlib import Path

import logits_oracle
import pytest
import torch
import transformers
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

from radixlm.kernels import torch_ref
from radixlm.runtime.models.alibi_config import bloom_slopes
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.runner.attention_backend import AttentionBackend

LENGTH = 300
CASES = FamilyCases({"falcon_rw": "FalconConfig"}, LENGTH)
_variants = AttentionBackend.set_layer_variants
DIFFERENCES = [
    ("ALiBi", "attr", (AttentionBackend, "set_layer_variants", lambda self, windows, **kw: _variants(self, windows))),
    ("the bfloat16 rounding of the slopes and products", "attr", (torch_ref, "round_bf16", lambda x: x.float())),
    ("the bfloat16 rounding of positions past 256", "attr", (torch_ref, "round_position", lambda x: x)),
    ("the division by sqrt(head_dim)", "fields", {"alibi_bf16": 1.0}),
    ("Falcon's biases (BLOOM's ALiBi in their place)", "fields", {"alibi_bf16": None}),
]


@pytest.fixture(scope="module", autouse=True)
def long_pool():
    """Room in the paged pool for two requests of 300 tokens."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logits_oracle, "NUM_SLOTS", 1024)
        mp.setattr(logits_oracle, "MAX_CONTEXT", 320)
        yield


@pytest.fixture
def fam(tiny_model):
    return CASES("falcon_rw", tiny_model)


def test_config_reads_falcon_rw(tiny_model):
    config = read_model_config(tiny_model("falcon_rw"))
    assert config.nope_layers == (0, 1) and config.alibi_slopes == bloom_slopes(12) and config.alibi_bf16 == 0.25
    assert config.num_kv_heads == 12 and not config.parallel_residual and config.attention_bias


def test_prefill_single_and_batch(fam):
    check_prefill_single_and_batch(fam)


def test_extend_on_a_cached_prefix(fam):
    check_extend_on_a_cached_prefix(fam, prefix=250)


def test_chunked_prefill(fam):
    check_chunked_prefill(fam, chunk=64)


def test_decode_batch_of_two(fam):
    check_decode_pair(fam, start_a=284, start_b=286)


def test_mixed_step(fam):
    check_mixed_step(fam, a=280, b=262)


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    check_reference_kernels(fam, prefill=290, monkeypatch=monkeypatch)


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits("falcon_rw"), left_out, how, change, tmp_path, monkeypatch)


_TRITON_RUN = """
import sys
sys.path[:0] = [{tests!r}, {runtime!r}]
import logits_oracle
from paged_checks import check_triton_backend
check_triton_backend(logits_oracle.family_case("falcon_rw", {path!r}, {length}), "cpu", split={split}, slots=320)
"""


def test_triton_backend_under_the_interpreter(tiny_model):
    """The Triton kernels (the CUDA path) under TRITON_INTERPRET=1 in a subprocess: a prefill of 258 tokens, then
    decode steps to 262 (positions past 256 round), against HF."""
    pytest.importorskip("triton")
    here = Path(__file__).resolve().parent
    code = _TRITON_RUN.format(tests=str(here.parent), runtime=str(here), path=str(tiny_model("falcon_rw")),
                              length=262, split=258)
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(fam):
    """The compiled Triton kernels (float32 on CUDA against HF's float64 on the CPU), decodes past 290."""
    check_triton_backend(fam, "cuda", split=290, slots=320)


def test_served_greedily_as_hf_generates(tiny_model):
    """Through the scheduler in chunks of 8, the third request's prompt from the radix cache."""
    assert_greedy_serving_matches_hf(tiny_model("falcon_rw"))


@pytest.mark.parametrize("field", ["multi_query", "new_decoder_architecture"])
def test_alibi_beside_other_layouts_is_refused(field):
    config = transformers.FalconConfig(alibi=True, **{"multi_query": False, field: True},
                                       architectures=["FalconForCausalLM"])
    with pytest.raises(ValueError, match=f"alibi=True with {field}=True"):
        ModelConfig.from_hf(config)
