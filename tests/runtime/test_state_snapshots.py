"""Prefix caching for models with a recurrent state per request (radix_cache/state_snapshots.py): through the real
scheduler and a fake runner whose state of a row is the exact list of tokens it was fed (a state copied from the
wrong snapshot, at the wrong time or not at all shows as a state that is not the request's prefix), and through the
real runner with tiny hybrids of each kind of state against HF's greedy generate."""

import random

import pytest
from recurrent_checks import assert_snapshots_serve_as_hf_generates
from scheduler_harness import FakeRunner, collect, make_scheduler, oracle_generate, run_until_idle, submit

from radixlm.radix_cache.radix_tree import RadixCache
from radixlm.radix_cache.state_snapshots import StateSnapshots
from radixlm.runtime.scheduler.kv_manager import CACHE_POINT_MIN
from radixlm.runtime.step import PENDING


class FakeRecurrentRunner(FakeRunner):
    """A row's state is the tokens fed to it since position 0; the next token is the rule applied to that state,
    so a wrong state gives a wrong output, and each extend checks its state against the KV it reads back."""

    recurrent_state = True
    model = None

    def __init__(self, snapshots=6, **kw):
        super().__init__(**kw)
        self.state_snapshot_slots = range(self.num_rows + 1, self.num_rows + 1 + snapshots)
        self.states = [None] * (self.num_rows + 1 + snapshots)
        self.copies = 0

    def launch(self, batch):
        for src, dst in batch.state_copies:
            assert self.states[src] is not None, f"copy from state slot {src}, never written"
            self.states[dst] = list(self.states[src])
            self.copies += 1
        for r in batch.rows:
            state = self.states[r.row] = [] if r.prefix_len == 0 else self.states[r.row]
            kv = [self.kv[self.table[r.row][p]][1] if p < r.table_start else None for p in range(r.prefix_len)]
            assert state is not None and len(state) == r.prefix_len, (r.rid, r.prefix_len, state)
            assert all(k is None or k == s for k, s in zip(kv, state)), f"{r.rid}: state is not its prefix"
        fed = [[self.last_sampled[r.row] if t == PENDING else t for t in r.input_ids] for r in batch.rows]
        results = super().launch(batch)
        for r, res, tokens in zip(batch.rows, results, fed):
            self.states[r.row].extend(tokens)
            if r.sample:
                assert self.rule(self.states[r.row]) == res.next_token
        return results


def _serve(runner, reqs, **config):
    sched = make_scheduler(runner, **config)
    for rid, prompt, n in reqs:
        submit(sched, rid, prompt, n, params={"ignore_eos": True})
        run_until_idle(sched)
    return sched, collect(sched)


def test_a_second_turn_starts_from_the_state_the_first_left():
    rng = random.Random(1)
    system, first = [rng.randrange(1, 97) for _ in range(40)], [rng.randrange(1, 97) for _ in range(7)]
    answer = oracle_generate(system + first, 9)
    turn2 = system + first + answer + [5, 6, 7]
    runner = FakeRecurrentRunner()
    sched, out = _serve(runner, [("1", system + first, 9), ("2", turn2, 6)])
    assert out["1"]["tokens"] == answer
    assert out["2"]["tokens"] == oracle_generate(turn2, 6)
    assert out["2"]["cached_tokens"] == len(system + first + answer) - 1   # the last answer token was never fed
    assert not sched.config.disable_radix_cache


def test_a_shared_system_prompt_gets_a_snapshot_where_the_second_request_leaves_it():
    rng = random.Random(2)
    system = [rng.randrange(1, 97) for _ in range(CACHE_POINT_MIN + 8)]
    users = [[10 + i] + [rng.randrange(1, 97) for _ in range(4)] for i in range(3)]   # they differ at once
    runner = FakeRecurrentRunner()
    sched, out = _serve(runner, [(str(i), system + u, 4) for i, u in enumerate(users)])
    for i, u in enumerate(users):
        assert out[str(i)]["tokens"] == oracle_generate(system + u, 4)
    assert out["1"]["cached_tokens"] == 0          # no snapshot at the fork yet: it computes the system prompt ...
    assert out["2"]["cached_tokens"] == len(system)   # ... and stops there once to keep one for the next
    steps_of_1 = [s for step in runner.steps for s in step if s[0] == "1"]
    assert steps_of_1[:2] == [("1", 0, len(system)), ("1", len(system), 5)]


@pytest.mark.parametrize("case", ["users of one system prompt", "samples of one prompt"])
def test_a_burst_sharing_a_prompt_computes_the_shared_part_once(case):
    rng = random.Random(5)
    system = [rng.randrange(1, 97) for _ in range(CACHE_POINT_MIN + 20)]
    same = case == "samples of one prompt"
    prompts = [system + ([7, 8, 9] if same else [10 + i, 8, 9]) for i in range(4)]
    runner = FakeRecurrentRunner()
    sched = make_scheduler(runner)
    for i, prompt in enumerate(prompts):
        submit(sched, str(i), prompt, 5, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    assert [out[str(i)]["tokens"] for i in range(4)] == [oracle_generate(p, 5) for p in prompts]
    shared = len(prompts[0]) - 1 if same else len(system)   # at least one token of each prompt is computed
    assert sched.stats.prefill_tokens == shared + sum(len(p) - shared for p in prompts)
    assert sorted(out[str(i)]["cached_tokens"] for i in range(4)) == [0, shared, shared, shared]


def test_short_common_prefixes_do_not_stop_a_prefill():
    rng = random.Random(3)
    common = [rng.randrange(1, 97) for _ in range(CACHE_POINT_MIN - 1)]
    a, b = common + [1, 2, 3], common + [4, 5, 6]
    runner = FakeRecurrentRunner()
    _, out = _serve(runner, [("a", a, 3), ("b", b, 3)])
    assert out["b"]["tokens"] == oracle_generate(b, 3) and out["b"]["cached_tokens"] == 0
    assert [s for step in runner.steps for s in step if s[0] == "b"][0] == ("b", 0, len(b))


@pytest.mark.parametrize("seed,overlap", [(1, False), (2, False), (3, True), (4, True)])
def test_random_conversations_with_few_snapshots_evictions_and_retractions(seed, overlap):
    """Many agents sharing system prompts, each turn extending the last, on a KV pool and a snapshot pool too small
    to keep them all: every output is the rule's, and every state a row starts from is its exact prefix; with the
    overlap schedule too (plain decodes stay in flight)."""
    rng = random.Random(seed)
    systems = [[rng.randrange(1, 97) for _ in range(rng.randrange(30, 90))] for _ in range(3)]
    convs = {}
    runner = FakeRecurrentRunner(snapshots=4, num_slots=200, num_rows=6)
    sched = make_scheduler(runner, chunked_prefill_size=rng.choice([16, 48, 4096]), new_token_ratio=0.0,
                           overlap_schedule=overlap)
    expected, rid = {}, 0
    for _ in range(6):
        batch = []
        for _ in range(rng.randrange(1, 6)):
            c = rng.randrange(6)
            history = convs.get(c, [])
            history = history if 0 < len(history) < 130 else rng.choice(systems)   # it fits the pool alone
            prompt = history + [rng.randrange(1, 97) for _ in range(rng.randrange(1, 12))]
            n = rng.randrange(1, 30)
            expected[str(rid)] = out = oracle_generate(prompt, n)
            convs[c] = prompt + out
            batch.append((str(rid), prompt, n))
            rid += 1
        for r, prompt, n in batch:
            submit(sched, r, prompt, n, params={"ignore_eos": True})
        run_until_idle(sched)
    out = collect(sched)
    assert {r: o["tokens"] for r, o in out.items()} == expected
    assert sum(o["cached_tokens"] for o in out.values()) > 0 and runner.copies > 0
    assert sched.stats.retracted > 0   # these seeds' workloads retract
    assert (sched.stats.overlapped_steps > 0) == overlap
    sched.kv.check(sched.running)


def test_overlap_keeps_decodes_in_flight_and_a_stop_token_leaves_the_whole_turn_cached():
    """With the overlap schedule, a request that meets a stop token has already been fed it by the step in flight:
    its state then covers the whole turn, so its KV stays and the next turn starts after it.  Prompts and prefill
    chunks are collected before the next step is planned (their snapshots are taken before a step feeds the row)."""
    rng = random.Random(7)
    system, first = [rng.randrange(1, 97) for _ in range(40)], [rng.randrange(1, 97) for _ in range(7)]
    full = oracle_generate(system + first, 30)
    stop = next(t for t in full[5:] if full.index(t) >= 5)
    answer = full[:full.index(stop) + 1]
    turn2 = system + first + answer + [5, 6, 7]
    runner = FakeRecurrentRunner()
    sched = make_scheduler(runner, overlap_schedule=True, chunked_prefill_size=16)
    submit(sched, "1", system + first, 30, params={"stop_token_ids": [stop]})
    run_until_idle(sched)
    submit(sched, "2", turn2, 6, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    assert out["1"]["tokens"] == answer and out["2"]["tokens"] == oracle_generate(turn2, 6)
    assert out["2"]["cached_tokens"] == len(system + first + answer)   # the stop token's KV and state included
    assert sched.stats.overlapped_steps > 0 and sched.stats.dropped_in_flight == 1
    sched.kv.check(sched.running)


def test_snapshots_go_to_the_least_recently_used_unlocked_node_and_leave_removed_ones():
    tree = RadixCache()
    snaps = StateSnapshots(range(10, 12))
    tree.insert([1, 2, 3], [0, 1, 2])
    tree.insert([1, 2, 4], [0, 1, 3])
    tree.insert([5, 6], [4, 5])
    a, b, c = (tree.match_prefix(k).node for k in ([1, 2, 3], [1, 2, 4], [5, 6]))
    assert snaps.save(a, 0) and snaps.save(b, 1)
    tree.inc_lock_ref(a)
    tree.match_prefix([1, 2, 4])          # b is now the more recent, but a is locked: b gives its slot up
    assert snaps.save(c, 2) and b.state is None and c.state == 11 and a.state == 10
    tree.inc_lock_ref(c)
    assert not snaps.save(b, 3) and b.state is None            # every snapshot's node is locked
    tree.dec_lock_ref(a)
    tree.evict(1)                          # a leaves the tree: its slot is free again without waiting for LRU
    assert a.removed and snaps.save(b, 3) and b.state == 10
    assert snaps.take_copies() == [(0, 10), (1, 11), (2, 11), (3, 10)] and snaps.take_copies() == []


@pytest.mark.parametrize("arch", ["qwen3_5", "bamba", "lfm2"])
def test_hybrids_reuse_a_system_prompt_and_a_first_turn_as_hf_generates(tiny_model, arch):
    """A gated delta net, a Mamba-2 mixer and a short convolution: a second user of a system prompt computes it and
    keeps its state there, a third starts from it, and a second turn starts where the first turn ended."""
    pytest.importorskip("transformers.models.qwen3_5")
    assert_snapshots_serve_as_hf_generates(tiny_model(arch))


@pytest.mark.parametrize("recurrent", [False, True])
def test_only_plain_decodes_without_a_grammar_stay_in_flight_for_a_recurrent_state(recurrent):
    """Under the overlap schedule the next step may be planned with a step in flight; for a recurrent state only when
    that step holds plain decodes: applying a prompt's end or a chunk saves a snapshot, and a grammar's forced text
    may replace the token the next step feeds (which a state cannot give back)."""
    from types import SimpleNamespace

    from radixlm.runtime.scheduler.launcher import StepLauncher
    from radixlm.runtime.scheduler.plan import StepEntry, StepPlan

    class Runner:
        recurrent_state = recurrent

        def launch_forward(self, batch):
            raise AssertionError("not launched here")

    plain = SimpleNamespace(repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)

    def req(**kw):
        return SimpleNamespace(**{"grammar": None, "thinking": None, "prefill_done": True, "sampling_params": plain,
                                  **kw})

    launcher = StepLauncher(Runner(), 97, None, None, None)
    cases = {"decode": StepEntry(req(), 40, 1, True), "grammar": StepEntry(req(grammar=object()), 40, 1, True),
             "prompt end": StepEntry(req(prefill_done=False), 0, 40, True),
             "chunk": StepEntry(req(prefill_done=False), 0, 16, False),
             "last prompt token": StepEntry(req(prefill_done=False), 39, 1, True)}
    overlaps = {}
    for name, entry in cases.items():
        launcher.in_flight = (StepPlan([entry]), None, 0.0, None)
        overlaps[name] = launcher.may_overlap(10, lambda: 1)
    assert overlaps == {name: name == "decode" or not recurrent for name in cases}
