"""Every model family beyond the Llama family's own layer, and Mistral's windows, served: the real model runner under
the real scheduler, and the Engine.

Oracles: HF transformers' greedy generate on the same tiny random weights (every family); each request run alone
without a cache (the same tokens whatever the batching, chunking and prefix reuse: the windowed families).  The radix cache keeps every layer's
full KV, so a cached prefix longer than a sliding window (8, 6, 12 and 16 keys) must give exactly the tokens a
cold run gives; the test checks that such prefixes were in fact reused.
"""

import random

import pytest
import torch
from scheduler_harness import assert_greedy_serving_matches_hf, collect, make_scheduler, run_until_idle, submit
from tiny_models import FAMILY_ARCHS

from radixlm.runtime.models.loader import read_model_config
from radixlm.runtime.runner.model_runner import ModelRunner

FAMILIES = ("gemma2", "gemma3", "phi3", "mistral")   # sliding windows: cached prefixes past them
ALL_FAMILIES = FAMILY_ARCHS + ("mistral",)


def workload(vocab, seed=0):
    """2 groups x 3 requests sharing a 20-26-token prefix (past every window), 1-6 own tokens, 5-9 new tokens."""
    rng = random.Random(seed)
    reqs = []
    for g in range(2):
        prefix = [rng.randrange(3, vocab) for _ in range(rng.randrange(20, 27))]
        for k in range(3):
            suffix = [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 7))]
            reqs.append((f"g{g}-{k}", prefix + suffix, rng.randrange(5, 10)))
    return reqs


def run(path, reqs, one_at_a_time=False, **config):
    runner = ModelRunner(str(path), dtype="float32", max_total_tokens=2048, num_rows=16)
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        if one_at_a_time:
            run_until_idle(sched)
    run_until_idle(sched)
    out = collect(sched)
    return sched, {rid: out[rid]["tokens"] for rid, _, _ in reqs}, out


@pytest.fixture(scope="module", params=FAMILIES)
def reference(request, tiny_model):
    path = tiny_model(request.param)
    reqs = workload(read_model_config(path).vocab_size)
    _, want, _ = run(path, reqs, one_at_a_time=True, disable_radix_cache=True)
    return request.param, path, reqs, want


@pytest.mark.parametrize("mode,config", [
    ("together", {}),
    ("cached-prefix", {"one_at_a_time": True}),
    ("small-chunks", {"chunked_prefill_size": 8}),
    ("no-radix-small-chunks", {"disable_radix_cache": True, "chunked_prefill_size": 5}),
])
def test_same_tokens_with_cache_and_chunking(reference, mode, config):
    arch, path, reqs, want = reference
    sched, got, out = run(path, reqs, **config)
    assert got == want and all(len(t) > 0 for t in got.values())
    if mode == "cached-prefix":  # later requests of a group reused a prefix longer than every window
        window = max(w for w in read_model_config(path).layer_windows if w)
        reused = [out[rid]["cached_tokens"] for rid, _, _ in reqs if not rid.endswith("-0")]
        assert min(reused) > window, (reused, window)


@pytest.mark.parametrize("arch", ALL_FAMILIES)
def test_greedy_matches_hf_generate(arch, tiny_model):
    """Every family through the real runner and scheduler, prefills in chunks of 8: two requests at once, then a third
    that reuses the first's prompt (past every window) from the radix cache, each giving HF's greedy tokens.  Phi-3's
    prompts and outputs stay below its original context (32), where HF does not switch to the long rope factors and
    re-encode the prompt."""
    assert_greedy_serving_matches_hf(tiny_model(arch))


@pytest.mark.parametrize("arch", FAMILIES)
def test_engine_serves_each_family(arch, tiny_model):
    from radixlm.runtime.engine import Engine

    path = tiny_model(arch)
    vocab = read_model_config(path).vocab_size
    prompt = [random.Random(5).randrange(3, vocab) for _ in range(22)]
    _, want, _ = run(path, [("a", prompt, 6)])
    with Engine(model=str(path), dtype="float32", max_total_tokens=1024, log_level="warning") as engine:
        out = engine.generate(input_ids=prompt, sampling_params={"max_new_tokens": 6, "temperature": 0,
                                                                 "ignore_eos": True})
        assert out["output_ids"] == want["a"]
        assert engine.get_server_info()["context_length"] == read_model_config(path).max_position_embeddings  # no cap


def test_unsupported_architectures_get_a_clear_error(tmp_path):
    from transformers import Gemma2Config, Phi3Config, WhisperConfig

    from radixlm.runtime.models.config import ModelConfig
    from radixlm.runtime.models.loader import load_model

    WhisperConfig(architectures=["WhisperForConditionalGeneration"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="unsupported model architecture.*WhisperForConditionalGeneration"):
        load_model(tmp_path)
    with pytest.raises(ValueError, match="gelu-tanh"):
        ModelConfig.from_hf(Gemma2Config(hidden_activation="silu", architectures=["Gemma2ForCausalLM"]))
    mrope = Phi3Config(architectures=["Phi3ForCausalLM"])
    mrope.rope_parameters = {"rope_type": "mrope", "mrope_section": [8, 12, 12], "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="unsupported rope scaling type 'mrope'"):
        ModelConfig.from_hf(mrope)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", FAMILIES)
def test_cuda_engine_greedy_matches_hf(arch, tiny_model):
    """On CUDA: Triton's windowed and soft-capped kernels, CUDA graphs for the decodes, and a second ask served from
    a cached prefix past the window, all giving HF's greedy tokens (float32, on the same GPU; every family's layers
    on CUDA: test_family_logits.test_triton_backend_on_cuda)."""
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
