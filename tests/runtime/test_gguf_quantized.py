"""The default model's GGUF loaded with its weights kept quantized (runtime/models/gguf_weights.py), against HF
transformers' GGUF loader on the same file (the converted folder holds exactly what that loader produced).

- The float path (RADIXLM_QUANT_ISA=torch: each weight dequantized by the gguf package, float32 products) is the
  same computation as HF's float32 model on the same values: its logits differ only by float32 summation order
  (bound: 64 float32 ulps of the largest logit, about 4e-4 here; a wrong row order of q or k, a missing part or a
  swapped gate/up moves them by whole units).
- The int8 path (the best ISA here) adds the activations' per-block rounding (tests/kernels/test_cpu_quant.py
  bounds it per product).  Through 30 layers that bound does not compose into a tight one, so the model-level
  check is the one a user sees: greedy agreement with HF on at least 90% of positions, and logits within 10% of
  their range (measured: 26 of 27 positions, max difference 1.4 against a range of ~60).
"""

import pytest
import torch
from logits_oracle import Paged

from radixlm.kernels import cpu_quant
from radixlm.runtime.model_paths import gguf_file
from radixlm.runtime.models.gguf_weights import quantization_name
from radixlm.runtime.models.loader import load_tokenizer
from radixlm.runtime.models.quant_linear import QuantWeight

PROMPT = ("The quick brown fox jumps over the lazy dog. In the beginning God created the heaven and the earth. "
          "And the earth was without form")


@pytest.fixture(scope="module")
def hf_logits(smollm2_path):
    from transformers import AutoModelForCausalLM

    ids = load_tokenizer(smollm2_path).encode(PROMPT)
    hf = AutoModelForCausalLM.from_pretrained(str(smollm2_path), dtype=torch.float32).eval()
    with torch.no_grad():
        return ids, hf(torch.tensor([ids])).logits[0], hf.state_dict()   # [L, V]


def _paged(path, isa, monkeypatch):
    monkeypatch.setenv("RADIXLM_QUANT_ISA", isa)
    return Paged(path, torch.float32, gguf=gguf_file("smollm2-135m-instruct"))


def test_weights_stay_the_files_blocks_in_hf_row_order(smollm2_path, hf_logits, monkeypatch):
    _, _, state = hf_logits
    model = _paged(smollm2_path, "torch", monkeypatch).model
    assert model.quantization == {"kept": {"Q4_1": 210, "Q8_0": 1}, "dequantized": {}, "isa": "torch"}
    assert quantization_name(model.quantization) == "gguf:Q4_1+Q8_0 (torch)"
    assert isinstance(model.embed_tokens, QuantWeight) and model.lm_head is model.embed_tokens
    c = model.config
    for i in (0, c.num_layers - 1):
        attn, mlp, p = model.layers[i].self_attn, model.layers[i].mlp, f"model.layers.{i}."
        fused = {"self_attn.qkv_proj": (attn.qkv_proj, ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                 "self_attn.o_proj": (attn.o_proj, ("self_attn.o_proj",)),
                 "mlp.gate_up_proj": (mlp.gate_up_proj, ("mlp.gate_proj", "mlp.up_proj")),
                 "mlp.down_proj": (mlp.down_proj, ("mlp.down_proj",))}
        for name, (weight, hf_names) in fused.items():
            assert {part.fmt for part in weight.parts} == {"Q4_1"}, name
            ours = torch.cat([cpu_quant.dequantize(part.data, part.fmt, weight.k) for part in weight.parts])
            want = torch.cat([state[p + n + ".weight"] for n in hf_names])
            assert torch.equal(ours, want), f"layer {i} {name}"
    assert torch.equal(model.embed_tokens.rows(torch.tensor([0, 5, 49151])),
                       state["model.embed_tokens.weight"][[0, 5, 49151]])


def test_float_path_logits_match_hf_gguf_loader(smollm2_path, hf_logits, monkeypatch):
    ids, ref, _ = hf_logits
    got = _paged(smollm2_path, "torch", monkeypatch).step([(0, ids)])      # [L, V]
    bound = 64 * torch.finfo(torch.float32).eps * ref.abs().max().item()
    assert (got - ref).abs().max().item() <= bound


def test_int8_path_agrees_with_hf_greedy_prefill_and_decode(smollm2_path, hf_logits, monkeypatch):
    ids, ref, _ = hf_logits
    paged = _paged(smollm2_path, cpu_quant.best_isa(), monkeypatch)
    head = paged.step([(0, ids[:-3])])                                     # [L-3, V] prefill
    tail = torch.cat([paged.step([(0, [t])]) for t in ids[-3:]])           # [3, V] decode steps on the cache
    got = torch.cat([head, tail])                                          # [L, V]
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert agree >= 0.9, f"greedy agreement {agree:.2f}"
    span = (ref.max(-1).values - ref.min(-1).values).min().item()
    assert (got - ref).abs().max().item() <= 0.1 * span
    assert (got - ref).abs().max().item() > 1e-3   # it did run the int8 kernels


def test_engine_serves_the_gguf_quantized_and_reports_it(smollm2_path, monkeypatch):
    """The served model (scheduler process) gives the greedy tokens of the in-process quantized model."""
    from radixlm import Engine

    tok = load_tokenizer(smollm2_path)
    ids = tok.encode("The capital of France is")
    paged = _paged(smollm2_path, cpu_quant.best_isa(), monkeypatch)
    want, logits = [], paged.step([(0, ids)])
    for _ in range(8):
        want.append(int(logits[-1].argmax()))
        logits = paged.step([(0, [want[-1]])])
    monkeypatch.delenv("RADIXLM_QUANT_ISA")
    with Engine(model="smollm2-135m-instruct", quantization="gguf", dtype="float32", max_total_tokens=2048,
                log_level="warning") as engine:
        assert engine.get_server_info()["quantization"] == f"gguf:Q4_1+Q8_0 ({cpu_quant.best_isa()})"
        out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 8, "temperature": 0})
    assert out["output_ids"] == want


def test_quantization_gguf_needs_a_gguf(tiny_model):
    from radixlm.runtime.server.launch import _gguf_to_keep
    from radixlm.runtime.server_args import ServerArgs

    with pytest.raises(ValueError, match="needs a .gguf model"):
        _gguf_to_keep(ServerArgs(model=str(tiny_model("llama")), quantization="gguf"))
    assert _gguf_to_keep(ServerArgs(model=str(tiny_model("llama")))) is None
    assert _gguf_to_keep(ServerArgs(quantization="gguf")) == str(gguf_file("smollm2-135m-instruct"))
