"""Every model family beyond the Llama family's own layer against HF transformers on the same tiny random weights
(logits_oracle.py): prefill alone and batched, an extend on a cached prefix, chunked prefill, decode steps, a mixed
step, the torch reference kernels and the Triton kernels (under the interpreter on a CPU).

Each tiny model (tests/tiny_models.py) sets what makes its family differ, far from neutral: windows shorter than the
prompts (Gemma 2/3, Phi-3, OLMo 3, StarCoder2), soft-caps that bind, multipliers, NoPE layers, partial and
interleaved rotary embeddings, LayerNorms with biases, parallel blocks, norms after each sublayer.  The model runs as
the server runs it on a CPU (attention backend "auto", packed weights); every step goes through the paged pool with
shuffled slots over garbage.  Each family's own file proves the bound would notice its differences left out:
test_gemma_phi3.py, test_post_norm_families.py, test_llama_variants.py, test_layernorm_families.py,
test_parallel_block_families.py.  Served greedily against HF's generate: test_family_serving.py.
"""


import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from tiny_models import FAMILY_ARCHS

FAMILIES = FAMILY_ARCHS
LENGTH = 26  # prompt tokens: past every window (at most 12), below Phi-3's original context (32): its short factors


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), LENGTH)


def test_prefill_single_and_batch(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:13]
    both = paged.step([(1, short), (2, ids)])
    assert_close(both[:13], hf(short), "batched prefill, request 1")
    assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_on_a_cached_prefix_longer_than_the_windows(fam):
    _, path, hf, ids = fam
    other = ids[5:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:17]), (3, other[:4])])
    out = paged.step([(0, ids[17:]), (3, other[4:])])
    assert_close(out[:LENGTH - 17], ref[17:], "extend after prefix 17")
    assert_close(out[LENGTH - 17:], ref_other[4:], "extend after prefix 4")


def test_chunked_prefill(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, LENGTH, 5):
        assert_close(paged.step([(1, ids[start:start + 5])]), ref[start:start + 5], f"chunk at {start}")


def test_decode_batch_of_two_across_the_windows(fam):
    """Decode steps from inside the windows to past them (Phi-3: the native one-call decode, then op by op)."""
    _, path, hf, ids = fam
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    paged.step([(0, seq_a[:5]), (2, seq_b[:7])])
    for i in range(LENGTH - 7):
        out = paged.step([(0, [seq_a[5 + i]]), (2, [seq_b[7 + i]])])  # [2, V]
        assert_close(out[0], ref_a[5 + i], f"decode at {5 + i}, request a")
        assert_close(out[1], ref_b[7 + i], f"decode at {7 + i}, request b")


def test_mixed_step(fam):
    """Decodes beside a prefill chunk in one step (the backend splits them, windows on both parts)."""
    _, path, hf, ids = fam
    other = ids[::-1]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=4)
    paged.step([(0, ids[:20]), (1, other[:15])])
    out = paged.step([(0, [ids[20]]), (1, [other[15]]), (2, ids[:10])])
    assert_close(out[0], ref[20], "decode of request 0")
    assert_close(out[1], ref_other[15], "decode of request 1")
    assert_close(out[2:], ref[:10], "prefill of request 2")


def test_reference_kernels_and_dense_weights(fam, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path, seed=5, reference=True)
    assert_close(paged.step([(0, ids[:12])]), ref[:12], "reference prefill")
    for i in range(12, LENGTH):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_triton_backend_under_the_interpreter(fam):
    """The model over the Triton kernels (the CUDA path; here under TRITON_INTERPRET=1): windows, caps and sinks in
    them; a prefill, then decode steps."""
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    _check_triton_backend(fam, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(fam):
    """The same on the GPU, every family (float32 weights on CUDA against HF's float64 on the CPU)."""
    _check_triton_backend(fam, "cuda")


def _check_triton_backend(fam, device):
    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

    _, path, hf, ids = fam
    ref = hf(ids)

    def factory(config):
        kv = KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim, device=device)
        return create_attention_backend("triton", kv, config.sm_scale)

    model, _ = load_model(path, torch.float32, factory, device=device)
    table = ReqToTokenPool(2, 64, device=device)
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(8))[:LENGTH].tolist()
    table.write(0, 0, slots)
    split = 22
    fb = ForwardBatch.build(ids[:split], [0], [split], [0], slots[:split], table.table,
                            logits_indices=list(range(split)), device=device)
    assert_close(model.compute_logits(model.forward(fb)).cpu(), ref[:split], "triton prefill")
    for i in range(split, LENGTH):
        fb = ForwardBatch.build([ids[i]], [i], [1], [0], [slots[i]], table.table, device=device)
        assert_close(model.compute_logits(model.forward(fb))[0].cpu(), ref[i], f"triton decode at {i}")


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
