"""Speculative decoding under the real scheduler with a KV-sensitive fake model (scheduler_harness):
drafts that are verified, cut and given back never change an output, never break the KV ledger
(proved after every step), and stop tokens, stop limits and opt-outs behave as without drafts."""

import random

import pytest
from scheduler_harness import (
    FakeRunner,
    collect,
    make_scheduler,
    oracle_generate,
    repeating_token,
    run_until_idle,
    submit,
)

from radixlm.radix_cache.radix_tree import RadixCache
from radixlm.runtime.speculative.ngram import NgramIndex

SPEC = {"speculative_algorithm": "ngram", "speculative_num_draft_tokens": 4}


def workload(rng, n, out_range=(1, 60)):
    reqs = []
    prefixes = [[rng.randrange(1, 97) for _ in range(rng.randrange(10, 80))] for _ in range(4)]
    for i in range(n):
        prompt = rng.choice(prefixes) + [rng.randrange(1, 97) for _ in range(rng.randrange(1, 30))]
        reqs.append((f"r{i}", prompt, rng.randrange(*out_range)))
    return reqs


def test_ngram_index_finds_the_latest_longest_match():
    idx = NgramIndex(min_n=2, max_n=3)
    toks = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert idx.draft(toks, 3) == [7, 8, 5]          # "2 3" last seen before 7 (a 3-gram "5 2 3" never recurs)
    toks += [7]
    assert idx.draft(toks, 2) == [8, 5]              # "2 3 7" recurs: the longest match wins
    assert idx.draft([4, 4, 4, 4], 3) == [4, 4, 4]   # cut back: re-indexed; a period-1 run repeats itself
    assert idx.draft([5, 6, 7], 3) == []


def test_tree_continuation_follows_the_latest_branch():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5], list(range(5)))
    tree.insert([1, 2, 3, 8, 9, 10], list(range(5, 11)))
    assert tree.continuation([1, 2, 3], 3) == [8, 9, 10]      # the later insert is the latest branch
    assert tree.continuation([1, 2], 2) == [3, 8]
    assert tree.continuation([1, 2, 3, 4], 5) == [5]
    assert tree.continuation([1, 2, 7], 3) == []              # not all of the key is cached
    assert tree.continuation([1, 2, 3], 3, namespace="other") == []


@pytest.mark.parametrize("seed", range(4))
def test_randomized_speculation_keeps_outputs_and_ledger(seed):
    """Random arrivals, chunk sizes, draft lengths, KV budgets (retraction) and aborts, 10^4 steps in all
    across the seeds; the ledger is checked after every step (make_scheduler's check_ledger)."""
    rng = random.Random(seed)
    steps, accepted, verified = 0, 0, 0
    while steps < 2500:
        runner = FakeRunner(num_slots=rng.choice([400, 900, 4096]), rule=repeating_token)
        sched = make_scheduler(runner, chunked_prefill_size=rng.choice([16, 64, 1024]), new_token_ratio=0.0,
                               speculative_algorithm="ngram", speculative_num_draft_tokens=rng.randrange(1, 8),
                               speculative_max_step_tokens=rng.choice([4, 16, 256]))
        reqs = workload(rng, rng.randrange(4, 24))
        pending, aborted = list(reqs), set()
        while pending or sched.has_work():
            for _ in range(rng.randrange(0, 3)):
                if pending:
                    rid, prompt, n = pending.pop(0)
                    submit(sched, rid, prompt, n)
            if rng.random() < 0.02 and sched.running:
                victim = rng.choice(sched.running).rid
                aborted.add(victim)
                sched.handle_abort(type("Abort", (), {"rid": victim})())
            if sched.has_work():
                sched.step()
                steps += 1
        out = collect(sched)
        for rid, prompt, n in reqs:
            want = oracle_generate(prompt, n, repeating_token)
            if rid in aborted:
                assert want[:len(out[rid]["tokens"])] == out[rid]["tokens"], rid
            else:
                assert out[rid]["tokens"] == want, rid
        assert sched.kv.allocator.available() + sched.kv.tree.total_size() == sched.kv.allocator.total
        accepted += sched.speculator.accepted_tokens
        verified += sched.speculator.verify_passes
    assert accepted > 0 and verified > 0


def test_stop_token_inside_an_accepted_draft_ends_the_output_there():
    period = lambda context: context[-8]   # noqa: E731  (the text repeats every 8 tokens)
    prompt = [1, 2, 3, 4, 5, 6, 7, 90] * 3
    sched = make_scheduler(FakeRunner(rule=period), **SPEC)
    submit(sched, "s", prompt, 60, params={"stop_token_ids": [90]})
    run_until_idle(sched)
    out = collect(sched)["s"]
    assert out["tokens"] == [1, 2, 3, 4, 5, 6, 7, 90]
    assert out["finish_reason"] == {"type": "stop", "matched": 90}
    # the pass that verified [7, 90, 1, 2] accepted all four; the output still ends at 90
    assert sched.speculator.accepted_tokens == sched.speculator.draft_tokens == 8, sched.speculator.stats()
    assert sched.kv.allocator.available() + sched.kv.tree.total_size() == sched.kv.allocator.total


def test_max_new_tokens_and_opt_out():
    prompt = [5, 6, 7, 8] * 6
    sched = make_scheduler(FakeRunner(rule=repeating_token), **SPEC)
    submit(sched, "a", prompt, 13)
    submit(sched, "b", prompt + [9], 13, params={"speculative": False})
    run_until_idle(sched)
    out = collect(sched)
    assert out["a"]["tokens"] == oracle_generate(prompt, 13, repeating_token)
    assert out["b"]["tokens"] == oracle_generate(prompt + [9], 13, repeating_token)
    assert out["a"]["finish_reason"] == {"type": "length", "length": 13}
    assert sched.speculator.verify_passes > 0
    reqs_drafted = {e[0] for step in sched.runner.steps for e in step if e[2] > 1 and e[1] > 20}
    assert "b" not in reqs_drafted and "a" in reqs_drafted


def test_decodes_plus_drafts_stay_within_the_step_bound():
    reqs = workload(random.Random(1), 12, out_range=(20, 40))
    sched = make_scheduler(FakeRunner(rule=repeating_token), speculative_algorithm="ngram",
                           speculative_max_step_tokens=8)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n)
    drafted_with_many = 0
    while sched.has_work():
        before = sched.speculator.draft_tokens
        decoding = sum(1 for r in sched.running if r.pending_len == 1 and r.prefill_done)
        sched.step()
        drafted = sched.speculator.draft_tokens - before
        assert drafted == 0 or decoding + drafted <= 8, (decoding, drafted)
        drafted_with_many += drafted > 0 and decoding >= 3
    assert drafted_with_many > 0
    out = collect(sched)
    assert all(out[rid]["tokens"] == oracle_generate(p, n, repeating_token) for rid, p, n in reqs)
