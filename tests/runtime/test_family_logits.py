"""Every model family beyond the Llama family's own layer against HF transformers on the same tiny random weights
(logits_oracle.py): prefill alone and batched, an extend on a cached prefix, chunked prefill, decode steps, a mixed
step, the torch reference kernels and the Triton kernels (under the interpreter on a CPU).

Each tiny model (tests/tiny_models.py) sets what makes its family differ, far from neutral: windows shorter than the
prompts (Gemma 2/3, Phi-3, OLMo 3, StarCoder2), soft-caps that bind, multipliers, NoPE layers, partial and
interleaved rotary embeddings, LayerNorms with biases, parallel blocks, norms after each sublayer.  The model runs as
the server runs it on a CPU (attention backend "auto", packed weights); every step goes through the paged pool with
shuffled slots over garbage.  Each family's own file proves the bound would notice its differences left out:
test_gemma_phi3.py, test_post_norm_families.py, test_llama_variants.py, test_layernorm_families.py,
test_parallel_block_families.py, test_gpt_families.py.  Served greedily against HF's generate: test_family_serving.py.
"""


import pytest
import torch
from logits_oracle import family_case
from paged_checks import (
    check_chunked_prefill,
    check_decode_pair,
    check_extend_on_a_cached_prefix,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_reference_kernels,
    check_triton_backend,
)
from tiny_models import FAMILY_ARCHS

FAMILIES = FAMILY_ARCHS
LENGTH = 26  # prompt tokens: past every window (at most 12), below Phi-3's original context (32): its short factors


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


def test_prefill_single_and_batch(fam):
    check_prefill_single_and_batch(fam)


def test_extend_on_a_cached_prefix_longer_than_the_windows(fam):
    check_extend_on_a_cached_prefix(fam, prefix=17)


def test_chunked_prefill(fam):
    check_chunked_prefill(fam, chunk=5)


def test_decode_batch_of_two_across_the_windows(fam):
    """Decode steps from inside the windows to past them (Phi-3: the native one-call decode, then op by op)."""
    check_decode_pair(fam, start_a=5, start_b=7)


def test_mixed_step(fam):
    """Decodes beside a prefill chunk in one step (the backend splits them, windows on both parts)."""
    check_mixed_step(fam, a=20, b=15)


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    check_reference_kernels(fam, prefill=12, monkeypatch=monkeypatch)


def test_triton_backend_under_the_interpreter(fam):
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1): windows, caps and sinks in
    them; a prefill, then decode steps."""
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    check_triton_backend(fam, "cpu", split=22)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(fam):
    """The same on the GPU, every family (float32 weights on CUDA against HF's float64 on the CPU)."""
    check_triton_backend(fam, "cuda", split=22)


@pytest.mark.parametrize("arch", FAMILY_ARCHS)
def test_what_a_family_does_not_run_is_refused(arch, tiny_model, tmp_path):
    """Every family but the Llama variants (Granite, SmolLM3, Ministral, Seed-OSS): no tensor parallelism; a model class that does not map
    llama.cpp's names (loads_gguf_weights False) refuses GGUF weights kept quantized; the families with their own
    layers (OwnLayersForCausalLM) run without the native one-call decode."""
    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.models.own_layers import OwnLayersForCausalLM

    if arch in ("granite", "smollm3", "ministral", "seed_oss"):
        pytest.skip("Llama's layer: tensor parallelism runs (test_tp_logits.py)")
    model, _ = load_model(tiny_model(arch))
    with pytest.raises(ValueError, match="tensor parallelism"):
        model.enable_tensor_parallel(object())
    if not getattr(model, "loads_gguf_weights", True):
        with pytest.raises(ValueError, match="GGUF"):
            load_model(tiny_model(arch), gguf=tmp_path / "model.gguf")
    if isinstance(model, OwnLayersForCausalLM):
        assert model.enable_native_decode() is not None and model.native_decode is None
