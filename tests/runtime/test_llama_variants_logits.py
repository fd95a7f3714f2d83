"""Granite and SmolLM3 (llama.py's model with ModelConfig fields set) against HF transformers on the same tiny random
weights (logits_oracle.py).

Granite's tiny model has every multiplier far from 1: embeddings x6, each sublayer's output x0.3 before it joins the
residual stream, scores scaled by 0.7 (head_dim's would be 0.25), logits / 4.  SmolLM3's rotates q and k on layers
0 and 2 but not on layer 1 (NoPE).  The model runs as the server runs it on a CPU (attention backend "auto", packed
weights) and once with the torch reference kernels; every step goes through the paged pool with shuffled slots over
garbage.  test_each_difference_matters proves the oracle notices any one of them left out.  Served: greedy tokens
through the real scheduler (CPU) and the Engine (CUDA, a gpu test) against HF generate.
"""

import json
import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close

from radixlm.runtime.models.loader import load_tokenizer, read_model_config

FAMILIES = ("granite", "smollm3")
LENGTH = 30


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tiny_model):
    """-> (arch, path, HF oracle, LENGTH token ids)."""
    path = tiny_model(request.param)
    ids = random.Random(21).choices(range(load_tokenizer(path).vocab_size), k=LENGTH)
    return request.param, path, HF(path), ids


def test_prefill_single_and_batch(fam):
    _, path, hf, ids = fam
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:13]
    both = paged.step([(1, short), (2, ids)])
    assert_close(both[:13], hf(short), "batched prefill, request 1")
    assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_on_a_cached_prefix(fam):
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
    for start in range(0, LENGTH, 4):
        assert_close(paged.step([(1, ids[start:start + 4])]), ref[start:start + 4], f"chunk at {start}")


def test_decode_batch_of_two(fam):
    """Op by op: the native one-call decode (rope on every layer, no residual multiplier) is off for both."""
    _, path, hf, ids = fam
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    assert paged.model.native_decode is None
    assert "residual multiplier or layers without rope" in paged.model.enable_native_decode()
    paged.step([(0, seq_a[:5]), (2, seq_b[:7])])
    for i in range(LENGTH - 7):
        out = paged.step([(0, [seq_a[5 + i]]), (2, [seq_b[7 + i]])])  # [2, V]
        assert_close(out[0], ref_a[5 + i], f"decode at {5 + i}, request a")
        assert_close(out[1], ref_b[7 + i], f"decode at {7 + i}, request b")


def test_mixed_step(fam):
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


NEUTRAL = {"granite": [{"embedding_multiplier": 1.0}, {"residual_multiplier": 1.0},
                       {"attention_multiplier": 0.25}, {"logits_scaling": 1.0}],   # 0.25: head_dim 16's scale
           "smollm3": [{"no_rope_layers": [1, 1, 1]}, {"no_rope_layers": [0, 0, 0]}]}


def test_each_difference_matters(fam, tmp_path):
    """The same weights loaded with one multiplier made neutral, or rope on every layer or none, leave the bound."""
    arch, path, hf, ids = fam
    ref = hf(ids)
    for i, change in enumerate(NEUTRAL[arch]):
        folder = tmp_path / f"variant-{i}"
        shutil.copytree(path, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(AssertionError):
            assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, f"with {change}")


def test_model_config_fields(tiny_model):
    granite = read_model_config(tiny_model("granite"))
    assert (granite.embedding_multiplier, granite.residual_multiplier, granite.logits_scaling) == (6.0, 0.3, 4.0)
    assert granite.sm_scale == 0.7 and granite.o_proj_bias and granite.nope_layers == ()
    smollm3 = read_model_config(tiny_model("smollm3"))
    assert smollm3.nope_layers == (1,) and smollm3.o_proj_bias and smollm3.sm_scale == 16 ** -0.5
    assert (smollm3.embedding_multiplier, smollm3.residual_multiplier, smollm3.logits_scaling) == (1.0, 1.0, 1.0)
    assert smollm3.sliding_window is None and smollm3.context_length == 256


def test_smollm3_sliding_window_only_when_used():
    """HF windows a layer only with use_sliding_window (then its NoPE layers, by default); the kernels enforce it, so
    the context is not capped (logits against HF: test_config_variants.py)."""
    from transformers import SmolLM3Config

    from radixlm.runtime.models.config import ModelConfig

    kw = dict(num_hidden_layers=4, sliding_window=16, max_position_embeddings=256, architectures=["SmolLM3ForCausalLM"])
    unused = ModelConfig.from_hf(SmolLM3Config(**kw))
    assert unused.sliding_window is None and not unused.layer_windows and unused.nope_layers == (3,)
    used = ModelConfig.from_hf(SmolLM3Config(use_sliding_window=True, **kw))
    assert used.layer_windows == (None, None, None, 16) and used.context_length == 256


def test_unsupported_settings_get_a_clear_error(tiny_model):
    from transformers import GraniteConfig, SmolLM3Config

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.gguf_weights import load_gguf_weights

    with pytest.raises(ValueError, match="mlp_bias"):
        ModelConfig.from_hf(GraniteConfig(mlp_bias=True, architectures=["GraniteForCausalLM"]))
    with pytest.raises(ValueError, match="no_rope_layers"):
        ModelConfig.from_hf(SmolLM3Config(num_hidden_layers=4, no_rope_layers=[1, 0], layer_types=["full_attention"] * 4,
                                          architectures=["SmolLM3ForCausalLM"]))
    model = Paged(tiny_model("granite"), reference=True).model
    with pytest.raises(ValueError, match="GraniteForCausalLM: GGUF"):
        load_gguf_weights(model, "never-read.gguf", "torch")


@pytest.mark.parametrize("arch", FAMILIES)
def test_served_greedy_matches_hf_generate(arch, tiny_model):
    """The real model runner under the real scheduler, prefills in chunks of 8: two requests at once, then a third
    that reuses the first's prompt from the radix cache, each giving HF's greedy tokens."""
    from scheduler_harness import collect, make_scheduler, run_until_idle, submit
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.runner.model_runner import ModelRunner

    path = tiny_model(arch)
    rng = random.Random(7)
    vocab = read_model_config(path).vocab_size
    prompts = [[rng.randrange(3, vocab) for _ in range(n)] for n in (17, 22)]
    reqs = [("a", prompts[0], 10), ("b", prompts[1], 8), ("c", prompts[0] + prompts[1][:3], 9)]
    sched = make_scheduler(ModelRunner(str(path), dtype="float32", max_total_tokens=2048, num_rows=16),
                           chunked_prefill_size=8)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        if rid == "b":
            run_until_idle(sched)
    run_until_idle(sched)
    out = collect(sched)
    assert out["c"]["cached_tokens"] >= 16
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    for rid, prompt, n in reqs:
        with torch.no_grad():
            want = hf.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert out[rid]["tokens"] == want[0, len(prompt):].tolist(), rid


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", FAMILIES)
def test_cuda_engine_greedy_matches_hf(arch, tiny_model):
    """On CUDA: the Triton kernels with Granite's score scale, CUDA graphs for the decodes, and a second ask served
    from the cached prompt, all giving HF's greedy tokens (float32, on the same GPU)."""
    from transformers import AutoModelForCausalLM

    from radixlm.runtime.engine import Engine

    path = tiny_model(arch)
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).cuda().eval()
    prompt = [random.Random(6).randrange(3, hf.config.vocab_size) for _ in range(18)]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=10, min_new_tokens=10,
                           do_sample=False)[0, 18:].tolist()
    params = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}
    with Engine(model=str(path), dtype="float32", chunked_prefill_size=8, log_level="warning") as engine:
        assert str(engine.backend.info["device"]).startswith("cuda")
        for _ in range(2):
            assert engine.generate(input_ids=prompt, sampling_params=params)["output_ids"] == want
