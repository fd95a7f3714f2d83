"""The disk tier with the real model runner: greedy outputs with the tier off, on, and served from disk
after a restart (a new runner and scheduler on the same folder) are the same tokens; blocks written by
another dtype or model are never read.

A prefix served from disk is attended by another path (the extend on a cached prefix instead of a fresh prefill),
so in bfloat16 a logit can come one rounding apart: tokens then part only where the off run's top two were tied
within BF16_TIE (two bfloat16 steps of a logit under 32, SmolLM2's range), and are compared up to there."""

import random
import time

import pytest
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.models.loader import resolve_model_path
from radixlm.runtime.runner.model_runner import ModelRunner

BLOCK = 32
BF16_TIE = 2 * 2.0 ** (5 - 8)


def workload(vocab, seed=0):
    rng = random.Random(seed)
    shared = [rng.randrange(3, vocab) for _ in range(70)]
    return [(f"r{i}", shared + [rng.randrange(3, vocab) for _ in range(rng.randrange(20, 90))], 8) for i in range(6)]


def run(model_path, dtype, reqs, folder=None):
    runner = ModelRunner(model_path, dtype=dtype, max_total_tokens=4096, num_rows=16)
    config = {"kv_disk_dir": str(folder), "kv_disk_block": BLOCK} if folder else {}
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True}, return_logprob=True, top_logprobs_num=2)
        run_until_idle(sched)      # one at a time: the same batch shapes in every run
    if sched.disk:
        assert sched.disk.drain()
        sched.disk.close(time.monotonic() + 5.0)   # its threads end and let the runner go
    out = collect(sched)
    return sched, {rid: out[rid] for rid, _, _ in reqs}, {rid: out[rid]["cached_tokens"] for rid, _, _ in reqs}


def assert_same_tokens(got, want, dtype):
    """The same tokens; in bfloat16, or the same up to a position where want's top two were tied (see above)."""
    for rid, w in want.items():
        a, b = got[rid]["tokens"], w["tokens"]
        if a == b:
            continue
        assert dtype == "bfloat16" and len(a) == len(b), (rid, a, b)
        i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        top_lp, _, tops = w["output_logprobs"][i]
        others = {tok: lp for lp, tok in tops}
        assert a[i] in others and top_lp - others[a[i]] <= BF16_TIE, (rid, i, a, b, w["output_logprobs"][i])


@pytest.fixture(scope="module", params=["llama-float32", "qwen2-bfloat16", "smollm2-float32", "smollm2-bfloat16"])
def case(request, tiny_model):
    arch, dtype = request.param.split("-")
    path = str(resolve_model_path("smollm2-135m-instruct") if arch == "smollm2" else tiny_model(arch))
    from radixlm.runtime.models.loader import read_model_config
    return path, dtype, workload(read_model_config(path).vocab_size)


def test_same_tokens_off_on_and_after_restart(case, tmp_path):
    path, dtype, reqs = case
    _, want, _ = run(path, dtype, reqs)
    first, got, _ = run(path, dtype, reqs, tmp_path)
    assert_same_tokens(got, want, dtype)
    assert first.disk.stats()["disk_blocks"] >= 2
    again, got, cached = run(path, dtype, reqs, tmp_path)
    assert_same_tokens(got, want, dtype)
    stats = again.disk.stats()
    assert stats["disk_loaded_tokens"] >= BLOCK * 2 and stats["disk_corrupt"] == 0
    assert cached["r0"] >= (len(reqs[0][1]) - 1) // BLOCK * BLOCK     # a cold tree: all of it from disk


def test_other_dtype_or_model_gets_no_hits(tiny_model, tmp_path):
    path = str(tiny_model("llama"))
    from radixlm.runtime.models.loader import read_model_config
    reqs = workload(read_model_config(path).vocab_size, seed=1)[:2]
    run(path, "float32", reqs, tmp_path)
    other_dtype, _, _ = run(path, "bfloat16", reqs, tmp_path)
    assert other_dtype.disk.stats()["disk_loaded_tokens"] == 0
    other_model, _, _ = run(str(tiny_model("qwen2")), "float32", reqs, tmp_path)
    assert other_model.disk.stats()["disk_loaded_tokens"] == 0
    same, _, _ = run(path, "float32", reqs, tmp_path)
    assert same.disk.stats()["disk_loaded_tokens"] > 0


def test_host_tier_and_write_back_same_tokens_under_kv_pressure(tiny_model, tmp_path):
    """A KV pool of 512 tokens for a workload of about 2,300: the host tier (its CPU twin) and write-back
    serve evicted prefixes back, and the greedy tokens equal a run without tiers."""
    path = str(tiny_model("llama"))
    from radixlm.runtime.models.loader import read_model_config
    vocab = read_model_config(path).vocab_size
    rng = random.Random(2)
    shared = [[rng.randrange(3, vocab) for _ in range(96)] for _ in range(6)]
    order = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 1, 2, 3, 4, 5]   # reused, evicted, then asked again
    reqs = [(f"r{i}", shared[k] + [rng.randrange(3, vocab) for _ in range(30)], 4) for i, k in enumerate(order)]

    def run_tiers(**config):
        runner = ModelRunner(path, dtype="float32", max_total_tokens=512, num_rows=8)
        sched = make_scheduler(runner, kv_disk_block=BLOCK, **config)
        for rid, prompt, n in reqs:
            submit(sched, rid, prompt, n, params={"ignore_eos": True})
            run_until_idle(sched)
        out = collect(sched)
        return sched, {rid: out[rid]["tokens"] for rid, _, _ in reqs}

    _, want = run_tiers()
    host, got = run_tiers(kv_host_size="64M", kv_host_on_cpu=True)
    assert got == want
    assert host.disk.stats()["host_loaded_tokens"] >= 96 * 6
    back, got = run_tiers(kv_disk_dir=str(tmp_path), kv_disk_write_policy="write_back")
    assert got == want
    assert back.disk.stats()["disk_writeback_blocks"] > 0 and back.disk.stats()["disk_loaded_tokens"] > 0
