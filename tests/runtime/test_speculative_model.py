"""Speculative decoding on the real model runner and scheduler (tiny random model, float32): greedy
outputs equal plain decoding's, token for token, with drafts from prompt lookup and from the radix
tree, with chunked prefill, under KV pressure that forces retraction, and with logprobs."""

import random

import pytest
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.runner.model_runner import ModelRunner


@pytest.fixture(scope="module")
def model_path(tiny_model):
    return str(tiny_model("llama"))


def vocab_of(path):
    from radixlm.runtime.models.loader import read_model_config
    return read_model_config(path).vocab_size


def workload(vocab, seed=0, n=16):
    """Prompts that repeat spans of themselves (so prompt lookup finds drafts), and some that do not."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        base = [rng.randrange(3, vocab) for _ in range(rng.randrange(8, 24))]
        prompt = base * rng.randrange(2, 5) + base[:rng.randrange(1, len(base))] if i % 3 else base * 2
        reqs.append((f"r{i}", prompt, rng.randrange(12, 32)))
    return reqs


def run(model_path, reqs, one_at_a_time=False, max_total_tokens=8192, logprobs=False, **config):
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=max_total_tokens, num_rows=64)
    sched = make_scheduler(runner, **config)
    kw = {"return_logprob": True, "top_logprobs_num": 2} if logprobs else {}
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True}, **kw)
        if one_at_a_time:
            run_until_idle(sched)
    run_until_idle(sched)
    return sched, collect(sched)


@pytest.fixture(scope="module")
def reference(model_path):
    reqs = workload(vocab_of(model_path))
    _, out = run(model_path, reqs)
    return reqs, {rid: out[rid]["tokens"] for rid, _, _ in reqs}


SPEC = {"speculative_algorithm": "ngram", "speculative_num_draft_tokens": 4}


@pytest.mark.parametrize("mode,config", [
    ("together", {}),
    ("one-at-a-time", {"one_at_a_time": True}),
    ("small-chunks", {"chunked_prefill_size": 16}),
    ("tight-kv", {"max_total_tokens": 400, "chunked_prefill_size": 64, "new_token_ratio": 0.0}),
])
def test_greedy_tokens_equal_plain_decoding(model_path, reference, mode, config):
    reqs, want = reference
    sched, out = run(model_path, reqs, **SPEC, **config)
    got = {rid: out[rid]["tokens"] for rid, _, _ in reqs}
    assert got == want
    info = sched.server_info()
    assert info["spec_verify_passes"] > 0 and info["spec_accepted_tokens"] > 0, info
    if mode == "tight-kv":
        assert sched.stats.retracted > 0
    assert sched.kv.allocator.available() + sched.kv.tree.total_size() == sched.kv.allocator.total


def test_penalties_and_min_new_tokens_as_plain_decoding(model_path, reference):
    """Penalties count the draft tokens before each position, min_new_tokens blocks eos there: asked
    again, each request is drafted its whole first answer from the tree, and every draft token is
    accepted (a position sampled with the wrong counts would refuse it)."""
    reqs, _ = reference
    reqs = reqs[:8]
    params = {"frequency_penalty": 0.4, "presence_penalty": 0.2, "repetition_penalty": 1.2, "min_new_tokens": 6}
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=8192, num_rows=16)
    sched = make_scheduler(runner, **SPEC)
    for again in ("", "-again"):
        for rid, prompt, n in reqs:
            submit(sched, rid + again, prompt, n, params=params)
        run_until_idle(sched)
    out = collect(sched)
    stats = sched.speculator.stats()
    assert stats["spec_verify_passes"] > 0 and stats["spec_accepted_tokens"] == stats["spec_draft_tokens"], stats
    for rid, _, _ in reqs:
        assert out[rid + "-again"]["tokens"] == out[rid]["tokens"], rid
        assert out[rid + "-again"]["finish_reason"] == out[rid]["finish_reason"], rid


def test_radix_tree_continuation_drafts_a_retry(model_path, reference):
    """A request asked again after it finished is drafted from the tree: most of it in few passes."""
    reqs, want = reference
    rid, prompt, n = next(r for r in reqs if r[0] == "r0")
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=8192, num_rows=8)
    sched = make_scheduler(runner, **SPEC)
    submit(sched, "first", prompt, n, params={"ignore_eos": True, "speculative": False})
    run_until_idle(sched)
    submit(sched, "again", prompt, n, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    assert out["first"]["tokens"] == out["again"]["tokens"] == want[rid]
    stats = sched.speculator.stats()
    assert stats["spec_accepted_tokens"] == stats["spec_draft_tokens"] > 0, stats   # the tree knew the answer
    assert stats["spec_verify_passes"] <= (n - 1) // (SPEC["speculative_num_draft_tokens"] + 1) + 2, stats


def test_logprobs_of_accepted_tokens_equal_plain_decoding(model_path, reference):
    reqs, _ = reference
    reqs = reqs[:6]
    _, plain = run(model_path, reqs, logprobs=True)
    sched, spec = run(model_path, reqs, logprobs=True, **SPEC)
    assert sched.speculator.accepted_tokens > 0
    for rid, _, _ in reqs:
        assert spec[rid]["tokens"] == plain[rid]["tokens"]
        got, want = spec[rid]["output_logprobs"], plain[rid]["output_logprobs"]
        assert [e[1] for e in got] == [e[1] for e in want] == plain[rid]["tokens"]
        assert [e[0] for e in got] == pytest.approx([e[0] for e in want], abs=1e-4)
        assert [[t for _, t in e[2]] for e in got] == [[t for _, t in e[2]] for e in want]


def _chi2_same(a: dict, b: dict, z: float) -> tuple:
    """Two-sample chi-squared statistic of token counts a, b (categories expected < 5 pooled) and its
    critical value at the normal quantile z (Wilson-Hilferty)."""
    A, B = sum(a.values()), sum(b.values())
    cats, pooled = [], [0, 0]
    for t in set(a) | set(b):
        if (a.get(t, 0) + b.get(t, 0)) * min(A, B) / (A + B) < 5:
            pooled[0] += a.get(t, 0)
            pooled[1] += b.get(t, 0)
        else:
            cats.append((a.get(t, 0), b.get(t, 0)))
    if sum(pooled):
        cats.append(tuple(pooled))
    stat = 0.0
    for x, y in cats:
        ea, eb = A * (x + y) / (A + B), B * (x + y) / (A + B)
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    df = max(1, len(cats) - 1)
    crit = df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3
    return stat, crit


def _sample_runs(model_path, prompt, n, params, spec):
    runner = ModelRunner(model_path, dtype="float32", max_total_tokens=16384, num_rows=80)
    sched = make_scheduler(runner, max_running_requests=40,
                           **(dict(SPEC, speculative_max_step_tokens=512) if spec else {}))
    for i in range(n):
        submit(sched, f"s{i}", prompt, 6, params={"ignore_eos": True, **params(i)})
    run_until_idle(sched)
    out = collect(sched)
    return sched, [out[f"s{i}"]["tokens"] for i in range(n)]


def test_sampling_distribution_and_seeds_with_drafts(model_path, reference):
    reqs, _ = reference
    prompt = reqs[3][1]
    sampling = {"temperature": 0.8, "top_k": 6}
    # the same seed gives the same tokens with drafts, run to run, and as plain decoding gives them
    seeded = lambda i: dict(sampling, seed=1000 + i)   # noqa: E731
    spec_sched, spec_a = _sample_runs(model_path, prompt, 64, seeded, spec=True)
    _, spec_b = _sample_runs(model_path, prompt, 64, seeded, spec=True)
    _, plain = _sample_runs(model_path, prompt, 64, seeded, spec=False)
    assert spec_a == spec_b == plain
    assert spec_sched.speculator.accepted_tokens > 0
    # unseeded: the token distribution at every position is that of plain decoding (chi-squared, p = 0.001
    # over the 6 positions together); the drafts must have been taken often enough to show a bias
    spec_sched, spec = _sample_runs(model_path, prompt, 400, lambda i: sampling, spec=True)
    _, plain = _sample_runs(model_path, prompt, 400, lambda i: sampling, spec=False)
    assert spec_sched.speculator.accepted_tokens >= 100, spec_sched.speculator.stats()
    for pos in range(6):
        count = lambda outs: {t: sum(1 for o in outs if o[pos] == t) for t in {o[pos] for o in outs}}  # noqa: E731
        stat, crit = _chi2_same(count(spec), count(plain), z=3.35)
        assert stat < crit, (pos, stat, crit)


def test_bf16_with_deterministic_mode_equals_plain_decoding(model_path, reference):
    """bf16 greedy outputs depend on the batch shape (GEMM blocking by M); with --deterministic a verify
    pass computes every position as a decode would, so drafts change no token in bf16 either."""
    reqs, _ = reference
    reqs = reqs[:8]
    outs = []
    for config in ({}, SPEC):
        runner = ModelRunner(model_path, dtype="bfloat16", max_total_tokens=8192, num_rows=16, deterministic=True)
        sched = make_scheduler(runner, **config)
        for rid, prompt, n in reqs:
            submit(sched, rid, prompt, n, params={"ignore_eos": True})
        run_until_idle(sched)
        outs.append({rid: collect(sched)[rid]["tokens"] for rid, _, _ in reqs})
    assert sched.speculator.accepted_tokens > 0
    assert outs[0] == outs[1]
