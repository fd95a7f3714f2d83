"""The real model runner under the real scheduler: the same 64 greedy requests give the same tokens
whatever the batching, caching, chunking or KV pressure (oracle: each request run alone, no cache)."""

import random

import pytest
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.runner.model_runner import ModelRunner


def workload(vocab, seed=0):
    rng = random.Random(seed)
    reqs = []
    for g in range(8):
        prefix = [rng.randrange(3, vocab) for _ in range(rng.randrange(40, 90))]
        for k in range(8):
            suffix = [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 20))]
            reqs.append((f"g{g}-{k}", prefix + suffix, rng.randrange(4, 16)))
    return reqs


@pytest.fixture(scope="module")
def model_path(tiny_model):
    return str(tiny_model("llama"))


def run(model_path, reqs, one_at_a_time=False, max_total_tokens=8192, **config):
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=max_total_tokens, num_rows=80)
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        if one_at_a_time:
            run_until_idle(sched)
    run_until_idle(sched)
    out = collect(sched)
    return sched, {rid: out[rid]["tokens"] for rid, _, _ in reqs}


class ModelRunnerVocab:
    @staticmethod
    def size(path):
        from radixlm.runtime.models.loader import read_model_config
        return read_model_config(path).vocab_size


@pytest.fixture(scope="module")
def reference(model_path):
    reqs = workload(ModelRunnerVocab.size(model_path))
    _, out = run(model_path, reqs, one_at_a_time=True, disable_radix_cache=True)
    return reqs, out


@pytest.mark.parametrize("mode,config", [
    ("together", {}),
    ("one-at-a-time-cached", {"one_at_a_time": True}),
    ("no-radix", {"disable_radix_cache": True}),
    ("no-chunking", {"chunked_prefill_size": -1}),
    ("small-chunks", {"chunked_prefill_size": 24}),
    ("page-4", {"page_size": 4}),
    ("tight-kv", {"max_total_tokens": 320, "chunked_prefill_size": 64, "new_token_ratio": 0.0}),
])
def test_same_tokens_in_every_mode(model_path, reference, mode, config):
    reqs, want = reference
    sched, got = run(model_path, reqs, **config)
    assert got == want
    assert all(len(toks) > 0 for toks in got.values())
    if mode == "tight-kv":
        assert sched.stats.retracted > 0
    if mode in ("together", "one-at-a-time-cached"):
        assert sched.stats.cached_prompt_tokens > 0
