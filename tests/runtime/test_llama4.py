"""Llama 4 (text) against HF transformers on the same tiny random weights (logits_oracle.py), alone and as the
language model of Llama4ForConditionalGeneration.

The tiny model (tests/tiny_models.py llama4): layers 0-2 rotate interleaved pairs, L2-normalise q and k and attend
within chunks of 8 tokens (the 26-token prompts cross three chunk boundaries); layer 3 is NoPE with its queries
scaled from position 3 on (floor_scale 4); layers 1 and 3 route each token to 1 of 8 experts, whose input is scaled
by the sigmoid of its router logit, beside a shared expert.  test_the_oracle_notices_each_feature proves the bound
would catch any of them left out.
"""

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from paged_checks import check_prefill_single_and_batch, check_reference_kernels, check_triton_backend
from scheduler_harness import assert_greedy_serving_matches_hf

LENGTH = 26


@pytest.fixture(scope="module")
def case(tiny_model):
    return family_case("llama4", tiny_model("llama4"), LENGTH)


def test_prefill_single_and_batch(case):
    check_prefill_single_and_batch(case)


def test_extend_on_a_cached_prefix_across_chunks(case):
    """Prefixes ending inside a chunk (11) and at its edge (8); the new tokens cross the boundaries at 16 and 24."""
    _, path, hf, ids = case
    other = ids[5:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:11]), (3, other[:8])])
    out = paged.step([(0, ids[11:]), (3, other[8:])])
    assert_close(out[:LENGTH - 11], ref[11:], "extend after prefix 11")
    assert_close(out[LENGTH - 11:], ref_other[8:], "extend after prefix 8")


def test_chunked_prefill_decode_batch_and_mixed_step(case):
    _, path, hf, ids = case
    other = ids[3:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=2)
    for start in range(0, 20, 5):
        assert_close(paged.step([(1, ids[start:start + 5])]), ref[start:start + 5], f"chunk at {start}")
    paged.step([(2, other[:12])])
    for i in range(20, LENGTH - 1):  # across the chunk boundary at 24
        out = paged.step([(1, [ids[i]]), (2, [other[i - 8]])])  # [2, V]
        assert_close(out[0], ref[i], f"decode at {i}, request 1")
        assert_close(out[1], ref_other[i - 8], f"decode at {i - 8}, request 2")
    out = paged.step([(1, [ids[-1]]), (2, [other[LENGTH - 9]]), (0, ids[:11])])  # decodes beside a prefill
    assert_close(out[0], ref[-1], "mixed step, decode of request 1")
    assert_close(out[1], ref_other[LENGTH - 9], "mixed step, decode of request 2")
    assert_close(out[2:], ref[:11], "mixed step, prefill of request 0")


def test_reference_kernels_and_dense_weights(case, monkeypatch):
    check_reference_kernels(case, prefill=20, monkeypatch=monkeypatch)   # decodes across the chunk boundary at 24


def test_triton_backend_under_the_interpreter(case):
    """Triton kernels on the NoPE layer, the torch reference's chunk variant on the chunked ones."""
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    check_triton_backend(case, "cpu", split=22)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(case):
    """The same on the GPU: the fused Triton experts on input-scaled rows, chunked layers by the torch reference."""
    check_triton_backend(case, "cuda", split=22)


def test_multimodal_checkpoint_serves_its_language_model(tiny_model):
    """Llama4ForConditionalGeneration: its text weights loaded, the vision model's and projector's skipped."""
    _, path, hf, ids = family_case("llama4_mm", tiny_model("llama4_mm"), LENGTH)
    assert_close(Paged(path).step([(0, ids)]), hf(ids), "multimodal checkpoint's prefill")


def test_the_oracle_notices_each_feature(case, monkeypatch):
    """Attention over whole prefixes instead of chunks, no temperature tuning, no q/k L2 norms, or experts scaled at
    their output instead of their input: each leaves the bound."""
    from radixlm.runtime.models.llama4 import Llama4MoeBlock

    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=6, reference=True, rows=5)
    model, backend = paged.model, paged.model.attn_backend
    assert_close(paged.step([(0, ids)]), ref, "as it is")
    kept = backend.layer_variants
    backend.layer_variants = {}
    try:
        with pytest.raises(AssertionError):
            assert_close(paged.step([(1, ids)]), ref, "no chunks")
    finally:
        backend.layer_variants = kept
    for row, (attr, value) in enumerate((("temperature", None), ("l2_norm", False)), start=2):
        for layer in model.layers:
            monkeypatch.setattr(layer.self_attn, attr, value)
        with pytest.raises(AssertionError):
            assert_close(paged.step([(row, ids)]), ref, f"{attr} off")
        monkeypatch.undo()
    monkeypatch.setattr(Llama4MoeBlock, "forward", _experts_scaled_at_their_output)
    with pytest.raises(AssertionError):
        assert_close(paged.step([(4, ids)]), ref, "experts scaled at their output")


def _experts_scaled_at_their_output(block, x):
    from radixlm.runtime.models.layer_ops import silu_mul
    from radixlm.runtime.models.moe import grouped_experts
    from radixlm.runtime.models.packed_linear import linear

    top, ids = torch.topk(linear(x, block.gate), block.top_k, dim=1)  # [T, k]
    routed = grouped_experts(x, block.w13, block.w2, torch.sigmoid(top), ids)  # [T, H]
    return routed + linear(silu_mul(linear(x, block.shared_gate_up)), block.shared_down)  # [T, H]


def test_bad_configs_are_refused():
    transformers = pytest.importorskip("transformers")
    from radixlm.runtime.models.config import ModelConfig

    base = dict(vocab_size=64, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4)
    good = transformers.Llama4TextConfig(**base)
    good.architectures = ["Llama4ForCausalLM"]
    config = ModelConfig.from_hf(good)
    assert config.intermediate_size == 96 and config.moe.intermediate_size == 32
    for field, value in (("no_rope_layers", [1]), ("attention_chunk_size", None), ("floor_scale", 0),
                         ("layer_types", ["full_attention", "sliding_attention"])):
        bad = transformers.Llama4TextConfig(**base)
        bad.architectures = ["Llama4ForCausalLM"]
        setattr(bad, field, value)
        with pytest.raises(ValueError, match=field):
            ModelConfig.from_hf(bad)


def test_greedy_serving_matches_hf(case):
    assert_greedy_serving_matches_hf(case[1])
