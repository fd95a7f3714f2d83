"""`radixlm serve --dp-size 2`: two scheduler replicas behind one front.  Oracles: the shared
single-replica `server` (same options) for greedy tokens and for the hit rate of a 4-prefix-group
workload; each replica's own counters in /get_server_info; /proc for the processes after a replica
is killed (non-zero exit within 15 s, no orphans)."""

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from server_harness import ServerProcess, child_pids, cmdline, kill_child_and_expect_exit

VOCAB = 380        # under the vocabulary of tests/tiny_models.py (391 tokens)


@pytest.fixture(scope="module")
def dp_server(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("dp-logs"), "--dp-size", "2",
                        "--check-ledger").wait_ready()
    yield srv
    srv.stop()


def _generate(srv, ids, max_new_tokens, rid=None):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True,
                                                  "temperature": 0}}
    if rid:
        body["rid"] = rid
    r = srv.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _groups(seed, n_groups=4, per_group=6):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, VOCAB) for _ in range(rng.randrange(50, 80))] for _ in range(n_groups)]
    rounds = [[p + [rng.randrange(3, VOCAB) for _ in range(rng.randrange(4, 12))] for p in prefixes]
              for _ in range(per_group)]
    return rounds


def _run_rounds(srv, rounds, max_new_tokens=4):
    """Each round: one request per group, sent together; rounds one after another."""
    outs = []
    with ThreadPoolExecutor(len(rounds[0])) as pool:
        for batch in rounds:
            outs.append(list(pool.map(lambda ids: _generate(srv, ids, max_new_tokens), batch)))
    return outs


def test_greedy_outputs_equal_a_single_replica(dp_server, server):
    rounds = _groups(seed=1, per_group=3)
    want, got = _run_rounds(server, rounds, 12), _run_rounds(dp_server, rounds, 12)
    assert [[o["output_ids"] for o in r] for r in got] == [[o["output_ids"] for o in r] for r in want]
    assert all(len(o["output_ids"]) == 12 for r in got for o in r)


def test_hit_rate_of_prefix_groups_is_near_a_single_replica(dp_server, server):
    rounds = _groups(seed=2)

    def hit_rate(outs):
        metas = [o["meta_info"] for r in outs for o in r]
        return sum(m["cached_tokens"] for m in metas) / sum(m["prompt_tokens"] for m in metas)

    before = [r["received"] for r in dp_server.server_info()["replicas"]]
    single, dp = hit_rate(_run_rounds(server, rounds)), hit_rate(_run_rounds(dp_server, rounds))
    assert single > 0.6
    assert dp >= 0.9 * single, (dp, single)
    after = [r["received"] for r in dp_server.server_info()["replicas"]]
    assert all(a - b >= 6 for a, b in zip(after, before)), (before, after)   # both replicas served groups


def test_server_info_lists_both_replicas_and_flush_empties_both(dp_server):
    _generate(dp_server, [5, 6, 7, 8], 2)
    info = dp_server.wait_idle()
    reps = info["replicas"]
    assert [r["dp_rank"] for r in reps] == [0, 1] and info["dp_size"] == 2
    assert [r["max_total_num_tokens"] for r in reps] == [2048, 2048] and info["max_total_num_tokens"] == 4096
    for key in ("received", "tree_slots", "used_slots", "prefill_tokens", "cached_prompt_tokens"):
        assert info[key] == sum(r[key] for r in reps), key
    assert info["context_length"] == 256 and len(info["internal_states"]) == 2
    load = dp_server.get("/get_load").json()
    assert [entry["dp_rank"] for entry in load] == [0, 1]
    assert dp_server.post("/flush_cache").status_code == 200
    after = dp_server.server_info()
    assert [r["tree_slots"] for r in after["replicas"]] == [0, 0]


def _long_stream(srv, rid, first_token, events):
    body = {"input_ids": [first_token, 6, 7], "rid": rid, "stream": True,
            "sampling_params": {"max_new_tokens": 240, "ignore_eos": True}}
    with srv.post("/generate", json=body, stream=True) as r:
        for line in r.iter_lines(decode_unicode=True):
            if line:
                events.append(line)


def test_abort_reaches_the_replica_that_holds_the_request(dp_server):
    streams = {rid: [] for rid in ("dp-abort-a", "dp-abort-b")}
    threads = [threading.Thread(target=_long_stream, args=(dp_server, rid, 5 + i, ev), daemon=True)
               for i, (rid, ev) in enumerate(streams.items())]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not all(len(ev) >= 2 for ev in streams.values()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert [r["num_running_reqs"] for r in dp_server.server_info()["replicas"]] == [1, 1]   # one on each
    for rid in streams:
        assert dp_server.post("/abort_request", json={"rid": rid}).json()["success"] is True
    for t in threads:
        t.join(30)
    for ev in streams.values():
        last = json.loads(ev[-2][6:])
        assert last["meta_info"]["finish_reason"]["type"] == "abort" and len(last["output_ids"]) < 240
    info = dp_server.wait_idle()
    assert info["used_slots"] == info["tree_slots"]


def test_killing_one_replica_ends_the_server_without_orphans(dp_server):
    """Last in this file: it ends the module's server."""
    kids = child_pids(dp_server.proc.pid)
    schedulers = [p for p in kids if "scheduler" in cmdline(p)]
    assert len(schedulers) == 2 and any("detokenizer" in cmdline(p) for p in kids)
    victim = next(p for p in schedulers if "scheduler-1" in cmdline(p))
    kill_child_and_expect_exit(dp_server, victim, kids)
    assert "scheduler-1 process exited" in dp_server.log()
