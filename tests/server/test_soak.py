"""Faults that leave state behind: a server killed with SIGKILL leaves its IPC folder, which the next
start removes; rounds of concurrent clients that disconnect at every point of a request leave the KV
ledger whole (--check-ledger proves it every step; idle, free + tree == total and nothing is locked)
and the scheduler's RSS within RSS_GROWTH_BOUND_MB of its size after the first round.
Measured (tiny model, 24 clients a round): the scheduler grows about 8 MB a round, slowing (12 rounds:
482 -> 578 MB), the main process stays flat (404 -> 403 MB).  Attributed (scheduler probed between
rounds with tracemalloc, gc object counts and glibc mallinfo2): cache growth, not a leak.  The Python
heap grows 0.1 MB a round (radix-tree nodes, until the tree is full) and gc counts stay flat; the growth
is live native memory (malloc in use rises with RSS, free arena space stays ~5 MB: no fragmentation)
that follows the variety of batch shapes: random shapes +4.5-6 MB a round, the same traffic with fixed
prompt and output lengths +1.4 MB, and ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 halves it (+2.7 MB): oneDNN
keeps a primitive per (tokens in the batch x weight) shape for the packed linears (bounded: 1024 by
default); MKL_DISABLE_FAST_MM=1 changes nothing.
"""

import glob
import json
import os
import random
import signal
import socket
import tempfile
import threading
import time

import pytest
from server_harness import ServerProcess, alive, child_pids, cmdline

ROUNDS, CLIENTS = 5, 24
RSS_GROWTH_BOUND_MB = 80       # rounds 2..5 against round 1 (measured: 33-50 MB; printed)
MODES = ("connect", "headers", "half-body", "sent", "waiting", "first-event", "mid-stream", "complete")


def _ipc_dir_of(pid: int) -> str:
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "radixlm-*")):
        try:
            with open(os.path.join(path, "owner")) as f:
                if int(f.read().split()[0]) == pid:
                    return path
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no IPC folder owned by pid {pid}")


@pytest.fixture(scope="module")
def restarted(tiny_llama, tmp_path_factory):
    """A server killed with SIGKILL, then a fresh one: (the fresh server, the killed one's IPC folder)."""
    logs = tmp_path_factory.mktemp("logs")
    first = ServerProcess(tiny_llama, logs, api_key=None).wait_ready()
    stale = _ipc_dir_of(first.proc.pid)
    children = child_pids(first.proc.pid)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    deadline = time.monotonic() + 60
    while any(alive(p) for p in children):
        assert time.monotonic() < deadline, "the children outlived their killed parent"
        time.sleep(0.1)
    first.stop()
    assert os.path.isdir(stale), "SIGKILL left nothing to clean: the test would prove nothing"
    srv = ServerProcess(tiny_llama, logs, "--check-ledger", api_key=None).wait_ready()
    yield srv, stale
    crashed = srv.proc.poll()
    srv.stop()
    assert crashed is None, f"the soak server died:\n{srv.log()[-4000:]}"


def test_a_killed_servers_ipc_folder_is_removed_at_the_next_start(restarted):
    srv, stale = restarted
    assert not os.path.exists(stale)
    assert os.path.isdir(_ipc_dir_of(srv.proc.pid))         # the live server's own folder is kept
    assert "removed the IPC folder of a dead server" in srv.log()


def _body(rng, stream: bool) -> tuple:
    prompt = [11, 12, 13, 14, 15, 16] + [rng.randrange(20, 300) for _ in range(rng.randrange(2, 40))]
    sp = {"max_new_tokens": rng.randrange(8, 64), "temperature": 0.7, "ignore_eos": True}
    if rng.random() < 0.5:
        return "/generate", {"input_ids": prompt, "sampling_params": sp, "stream": stream}
    return "/v1/completions", {"prompt": prompt, "max_tokens": sp["max_new_tokens"], "temperature": 0.7,
                               "ignore_eos": True, "stream": stream}


def _client(port: int, mode: str, seed: int) -> None:
    rng = random.Random(seed)
    path, body = _body(rng, stream=mode in ("first-event", "mid-stream", "complete"))
    raw = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        if mode == "connect":
            return
        s.sendall(head + (raw[:len(raw) // 2] if mode == "half-body" else b"" if mode == "headers" else raw))
        if mode in ("headers", "half-body", "sent"):
            return
        if mode == "waiting":
            time.sleep(rng.uniform(0.05, 0.5))
            return
        want = {"first-event": 1, "mid-stream": rng.randrange(2, 6), "complete": None}[mode]
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
            if want is not None and got.count(b"data: ") >= want:
                return
        assert b"data: [DONE]" in got, got[-500:]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _ledger_whole(srv) -> dict:
    info = srv.wait_idle(timeout=120)
    assert info["free_slots"] + info["tree_slots"] == info["max_total_num_tokens"], info
    assert info["evictable_slots"] == info["tree_slots"], info          # nothing left locked
    return info


def test_disconnect_rounds_keep_the_ledger_and_the_scheduler_rss_bounded(restarted):
    srv, _ = restarted
    sched = [p for p in child_pids(srv.proc.pid) if "child scheduler" in cmdline(p)]
    assert len(sched) == 1
    rss, main_rss = [], []
    for rnd in range(ROUNDS):
        errors = []

        def run(i, rnd=rnd):
            try:
                _client(srv.port, MODES[i % len(MODES)], rnd * 1000 + i)
            except Exception as exc:  # collected: an assert in a thread would be lost
                errors.append(f"{MODES[i % len(MODES)]}: {exc!r}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        _ledger_whole(srv)
        assert srv.get("/health").status_code == 200
        rss.append(_rss_mb(sched[0]))
        main_rss.append(_rss_mb(srv.proc.pid))
    print(f"scheduler RSS per round (MB): {[round(x, 1) for x in rss]}; main: {[round(x, 1) for x in main_rss]}")
    assert max(rss[1:]) - rss[0] < RSS_GROWTH_BOUND_MB, rss
    assert max(main_rss[1:]) - main_rss[0] < RSS_GROWTH_BOUND_MB, main_rss
    r = srv.post("/generate", json={"input_ids": [11, 12, 13],
                                    "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4
