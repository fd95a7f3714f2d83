"""Decode steps of the default model's GGUF kept quantized (--quantization gguf) with every decoder layer in one
native call (runtime/models/quant_decode.py) against the op-by-op quantized path, on every ISA path of the
quantized kernels this machine runs (vnni, avx2, scalar; forced by RADIXLM_QUANT_ISA, skipped where absent).

The bound is zero, derived from what both paths compute: the activation quantization (each layer input rounded per
block of 32 to int8) happens once per product in both, on the same values, and the products are the same per-row
integer dot products (cpu_quant_layer.c reuses cpu_quant_linear.c's); rms norm, rope, the KV store, attention and
silu*mul are the same C functions the op-by-op path calls.  So the logits are equal bit for bit, step after step,
and so are the greedy tokens.  The fused path's own distance to the float model is tested where the op-by-op one's
is (test_gguf_quantized.py: its decode steps run fused; tests/kernels/test_cpu_quant_layer.py: each product within
the activation rounding bound, which a dropped scale breaks).
"""

import pytest
import torch
from logits_oracle import Paged

from radixlm.kernels import cpu_quant
from radixlm.runtime.model_paths import gguf_file
from radixlm.runtime.models.quant_decode import QuantNativeDecode, quant_unsupported_reason
from radixlm.runtime.models.quant_linear import QuantPart

PROMPTS = [(0, [1, 504, 3458, 282, 4649, 314, 2114]), (1, [1, 504, 33, 99])]
STEPS = 5


def _paged(path, isa, dtype, monkeypatch):
    reason = cpu_quant.isa_supported(isa)
    if reason:
        pytest.skip(f"{isa} path not runnable here: {reason}")
    monkeypatch.setenv("RADIXLM_QUANT_ISA", isa)
    return Paged(path, dtype, gguf=gguf_file("smollm2-135m-instruct"))


def _greedy(paged, fused: bool):
    """Prefill both prompts, then STEPS decode steps of both rows -> (logits of each decode step, the tokens,
    how many steps ran in the native call)."""
    model = paged.model
    native, ran = model.native_decode, []
    model.native_decode = native if fused else None
    run = native.run
    native.run = lambda x, fb: ran.append(1) or run(x, fb)   # counts the steps it took
    try:
        logits = paged.step(PROMPTS)                                          # [T, V]
        ends = torch.tensor([len(PROMPTS[0][1]) - 1, len(PROMPTS[0][1]) + len(PROMPTS[1][1]) - 1])
        tokens, steps = [logits[ends].argmax(-1).tolist()], []
        for _ in range(STEPS):
            logits = paged.step([(0, [tokens[-1][0]]), (1, [tokens[-1][1]])])   # [2, V]
            steps.append(logits)
            tokens.append(logits.argmax(-1).tolist())
    finally:
        model.native_decode = native
        del native.run
    return steps, tokens, len(ran)


@pytest.mark.parametrize("isa", cpu_quant.NATIVE_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_layers_equal_the_op_by_op_path(smollm2_path, isa, dtype, monkeypatch):
    fused = _paged(smollm2_path, isa, dtype, monkeypatch)
    assert isinstance(fused.model.native_decode, QuantNativeDecode)
    got, got_tokens, ran = _greedy(fused, fused=True)
    assert ran >= STEPS + 1   # the prefill asks too (and is refused); every decode step ran natively
    want, want_tokens, _ = _greedy(_paged(smollm2_path, isa, dtype, monkeypatch), fused=False)
    assert got_tokens == want_tokens
    for step, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), f"{isa} {dtype} decode step {step}: max diff {(a - b).abs().max().item():.3g}"


def test_op_by_op_where_the_call_cannot_take_a_weight(smollm2_path, monkeypatch):
    """Chosen at load: the torch ISA, or a weight in a format without a kernel, decodes op by op."""
    model = _paged(smollm2_path, "torch", torch.float32, monkeypatch).model
    assert model.native_decode is None
    assert quant_unsupported_reason(model) == "quantized kernels by torch"
    native = next((isa for isa in cpu_quant.NATIVE_ISAS if cpu_quant.isa_supported(isa) is None), None)
    if native is None:
        pytest.skip("no native quantized kernels here")
    model = _paged(smollm2_path, native, torch.float32, monkeypatch).model
    weight = model.layers[3].mlp.down_proj
    kept = weight.parts[0]
    weight.parts[0] = QuantPart("dense", torch.zeros(weight.shape))
    try:
        assert quant_unsupported_reason(model) == "a down_proj weight in a format without a kernel"
    finally:
        weight.parts[0] = kept
    assert quant_unsupported_reason(model) is None
