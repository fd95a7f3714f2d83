"""The real scheduler loop with a KV-sensitive fake model: outputs must equal the oracle in every mode."""

import random

import pytest
from scheduler_harness import FakeRunner, collect, make_scheduler, oracle_generate, run_until_idle, submit


def workload(seed=0, groups=8, per_group=8, out_range=(1, 24)):
    """64 requests: 8 groups sharing long prefixes, mixed suffix and output lengths."""
    rng = random.Random(seed)
    reqs = []
    for g in range(groups):
        prefix = [rng.randrange(1, 97) for _ in range(rng.randrange(40, 120))]
        for k in range(per_group):
            suffix = [rng.randrange(1, 97) for _ in range(rng.randrange(1, 30))]
            reqs.append((f"g{g}-{k}", prefix + suffix, rng.randrange(*out_range)))
    return reqs


def expected(reqs):
    return {rid: oracle_generate(p, n) for rid, p, n in reqs}


def run_together(reqs, runner=None, **config):
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n)
    run_until_idle(sched)
    return sched, collect(sched)


MODES = {
    "default": {},
    "no-radix": {"disable_radix_cache": True},
    "no-chunking": {"chunked_prefill_size": -1},
    "small-chunks": {"chunked_prefill_size": 16},
    "fcfs": {"schedule_policy": "fcfs"},
    "dfs-weight": {"schedule_policy": "dfs-weight"},
    "page-4": {"page_size": 4},
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_batched_outputs_match_oracle(mode):
    reqs = workload()
    sched, out = run_together(reqs, **MODES[mode])
    want = expected(reqs)
    for rid, _, n in reqs:
        assert out[rid]["tokens"] == want[rid], rid
        assert out[rid]["finish_reason"] == {"type": "length", "length": n}
    assert not sched.running and not sched.waiting


def test_one_at_a_time_matches_and_shares_prefixes():
    reqs = workload()
    sched = make_scheduler()
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n)
        run_until_idle(sched)
    out = collect(sched)
    assert {rid: out[rid]["tokens"] for rid, _, _ in reqs} == expected(reqs)
    hits = sum(1 for rid, _, _ in reqs if out[rid]["cached_tokens"] >= 40)
    assert hits >= 56, "every request after the first of its group should hit the shared prefix"


@pytest.mark.parametrize("page_size", [1, 4])
def test_tight_kv_forces_eviction_and_retraction(page_size):
    reqs = workload(seed=1, out_range=(40, 120))
    runner = FakeRunner(num_slots=640)
    sched, out = run_together(reqs, runner, page_size=page_size, chunked_prefill_size=64, new_token_ratio=0.0)
    assert {rid: out[rid]["tokens"] for rid, _, _ in reqs} == expected(reqs)
    assert sched.stats.retracted > 0, "the budget should have forced retraction"
    assert sched.kv.tree.total_size() > 0


def test_radix_cache_saves_prefill_work():
    reqs = workload()
    on, _ = run_together(reqs)
    off, _ = run_together(reqs, disable_radix_cache=True)
    assert on.stats.prefill_tokens < 0.5 * off.stats.prefill_tokens
    assert off.stats.cached_prompt_tokens == 0


def test_in_batch_shared_prefix_computed_once():
    prefix = list(range(1, 90))
    sched = make_scheduler()
    for k in range(6):
        submit(sched, f"r{k}", prefix + [k + 1, k + 2], 3)
    run_until_idle(sched)
    # the shared 89-token prefix is computed once, then each request computes its own tail
    assert sched.stats.prefill_tokens <= len(prefix) + 6 * 3


def test_prefix_a_chunked_prefill_is_computing_is_not_computed_again():
    # the first request's 152-token prompt runs in chunks of 100; its second chunk leaves 48 tokens of budget,
    # which the others must not spend computing the shared prefix beside it: they wait, then hit the cache
    prefix = [i % 90 + 1 for i in range(150)]
    sched = make_scheduler(chunked_prefill_size=100)
    for k in range(6):
        submit(sched, f"r{k}", prefix + [k + 1, k + 2], 3)
    run_until_idle(sched)
    out = collect(sched)
    assert sched.stats.prefill_tokens == len(prefix) + 6 * 2
    assert all(out[f"r{k}"]["cached_tokens"] == len(prefix) for k in range(1, 6))
    assert {rid: out[rid]["tokens"] for rid in out} == {f"r{k}": oracle_generate(prefix + [k + 1, k + 2], 3)
                                                        for k in range(6)}


def prefix_thrash(policy):
    rng = random.Random(5)
    prefixes = {name: [rng.randrange(1, 97) for _ in range(100)] for name in "ABC"}
    order = "ABCACBABC"
    runner = FakeRunner(num_slots=160)
    sched = make_scheduler(runner, schedule_policy=policy, max_running_requests=1)
    for i, name in enumerate(order):
        submit(sched, f"{name}{i}", prefixes[name] + [i + 1, i + 2], 2)
    run_until_idle(sched)
    out = collect(sched)
    return sum(1 for rid in out if out[rid]["cached_tokens"] < 100)


def test_prefix_thrashing_fcfs_vs_cache_aware():
    assert prefix_thrash("fcfs") >= 7
    assert prefix_thrash("lpm") == 3
    assert prefix_thrash("dfs-weight") == 3


def test_lpm_ageing_bound_prevents_starvation():
    hot = list(range(1, 60))
    sched = make_scheduler(schedule_age_limit=20, max_running_requests=2)
    submit(sched, "cold", [90, 91, 92, 93], 2)
    for k in range(40):
        submit(sched, f"hot{k}", hot + [k % 90 + 1], 1)
    steps_until_cold = None
    for step in range(10000):
        if not sched.has_work():
            break
        sched.step()
        if steps_until_cold is None and "cold" in collect(sched):
            steps_until_cold = step
    assert steps_until_cold is not None and steps_until_cold <= 25


def test_chunked_prefill_carries_running_decodes():
    runner = FakeRunner()
    sched = make_scheduler(runner, chunked_prefill_size=32)
    submit(sched, "decoder", [1, 2, 3], 30)
    sched.step()
    submit(sched, "long", list(range(1, 97)) * 3, 2)
    for _ in range(8):
        sched.step()
    for step in runner.steps[1:9]:
        rids = [rid for rid, _, _ in step]
        assert "decoder" in rids, "a decode was stalled by the long prompt"
        assert sum(ext for rid, _, ext in step if rid == "long") <= 32
    run_until_idle(sched)
    out = collect(sched)
    assert out["decoder"]["tokens"] == oracle_generate([1, 2, 3], 30)


def test_abort_waiting_and_running_frees_kv():
    from radixlm.runtime import io_struct as io
    sched = make_scheduler(max_running_requests=1)
    submit(sched, "a", list(range(1, 50)), 50)
    submit(sched, "b", list(range(2, 50)), 50)
    sched.step()
    sched.step()
    sched.handlers[io.AbortReq](io.AbortReq("a"))
    sched.handlers[io.AbortReq](io.AbortReq("b"))
    out = collect(sched)
    assert out["a"]["finish_reason"]["type"] == "abort"
    assert out["b"]["finish_reason"]["type"] == "abort"
    assert not sched.has_work()
    sched.kv.check([])
    assert sched.kv.allocator.available() + sched.kv.tree.evictable_size() == sched.kv.allocator.total


def test_max_new_tokens_zero_caches_prompt():
    prompt = list(range(1, 80))
    sched = make_scheduler()
    submit(sched, "warm", prompt, 0)
    run_until_idle(sched)
    submit(sched, "hit", prompt, 3)
    run_until_idle(sched)
    out = collect(sched)
    assert out["warm"]["tokens"] == [] and out["warm"]["finish_reason"]["type"] == "length"
    assert out["hit"]["cached_tokens"] == len(prompt) - 1
    assert out["hit"]["tokens"] == oracle_generate(prompt, 3)


def test_input_logprobs_from_start_len_even_when_cached():
    prompt = list(range(1, 60))
    sched = make_scheduler(chunked_prefill_size=16)
    submit(sched, "warm", prompt, 1)
    run_until_idle(sched)
    submit(sched, "lp", prompt, 2, return_logprob=True, logprob_start_len=10)
    run_until_idle(sched)
    lp = collect(sched)["lp"]["input_logprobs"]
    assert [t for _, t, _ in lp] == prompt[10:]
    assert lp[0][0] == -float(prompt[10])
    submit(sched, "lp0", prompt, 1, return_logprob=True, logprob_start_len=0)
    run_until_idle(sched)
    lp0 = collect(sched)["lp0"]["input_logprobs"]
    assert lp0[0] == [None, prompt[0], None] and len(lp0) == len(prompt)


def test_bad_requests_are_refused_and_scheduler_keeps_working():
    sched = make_scheduler(runner=FakeRunner(context_len=256))
    submit(sched, "empty", [], 4)
    submit(sched, "long", [1] * 300, 4)
    submit(sched, "badkey", [1, 2], 4, params={"bogus": 1})
    submit(sched, "badtok", [1, 100000], 4)
    submit(sched, "ok", [1, 2, 3], 4)
    run_until_idle(sched)
    out = collect(sched)
    for rid in ("empty", "long", "badkey", "badtok"):
        assert out[rid]["finish_reason"]["type"] == "abort" and out[rid]["finish_reason"]["status_code"] == 400
    assert out["ok"]["tokens"] == oracle_generate([1, 2, 3], 4)
