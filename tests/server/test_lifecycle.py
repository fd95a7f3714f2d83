"""Operations: the ready line, the grammar worker started before it, the CLI, 64 concurrent streams with disconnects (the KV ledger holds),
SIGTERM during load (no orphans within 10 s), a killed scheduler (503, then a non-zero exit)."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import aiohttp
import pytest
import requests
from server_harness import ServerProcess, alive, child_pids, cmdline


def test_ready_line(server):
    deadline = time.monotonic() + 10
    while f"radixlm ready: http://127.0.0.1:{server.port} (model " not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.1)


def test_the_grammar_compile_worker_is_up_before_the_server_reports_ready(tiny_llama, tmp_path):
    """Its import (seconds of CPU) once ran in the first seconds of serving and stalled the first steps; the
    oracle is the OS: at the first 200 from /health the worker process exists and has xgrammar loaded."""
    srv = ServerProcess(tiny_llama, tmp_path, api_key=None).wait_ready()
    try:
        scheduler = next(p for p in child_pids(srv.proc.pid) if "scheduler" in cmdline(p))
        workers = [p for p in child_pids(scheduler) if "radixlm.constrained.compile_worker" in cmdline(p)]
        assert len(workers) == 1
        with open(f"/proc/{workers[0]}/maps") as f:
            assert "xgrammar" in f.read()
    finally:
        srv.stop()


def test_cli_rejects_bad_flags():
    r = subprocess.run([sys.executable, "-m", "radixlm.runtime.cli", "serve", "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "port 0" in r.stderr
    r = subprocess.run([sys.executable, "-m", "radixlm.runtime.cli", "serve", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "--max-total-tokens" in r.stdout and "--api-key" in r.stdout


# ---- load with disconnects ----

async def _stream_client(session, server, i: int, drop: bool) -> dict:
    """One streaming client; `drop` ones hang up after two events."""
    if i % 2:
        path, body = "/generate", {"text": f"Client {i} says hello", "stream": True,
                                   "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
    else:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": f"client {i}"}],
                                              "max_tokens": 40, "stream": True, "ignore_eos": True}
    lines = []
    async with session.post(server.url + path, json=body, headers=server.headers) as resp:
        status = resp.status
        async for raw in resp.content:
            line = raw.decode().strip()
            if line:
                lines.append(line)
            if drop and len(lines) >= 2:
                resp.close()
                break
    return {"status": status, "lines": lines, "drop": drop, "path": path}


async def _load(server, clients: int, dropping: int) -> list:
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        return await asyncio.gather(*[_stream_client(session, server, i, i < dropping) for i in range(clients)])


def test_64_streams_with_a_quarter_disconnecting_keep_the_kv_ledger(server):
    results = asyncio.run(_load(server, 64, 16))
    assert all(r["status"] < 500 for r in results)
    assert all(r["status"] == 200 for r in results), [r for r in results if r["status"] != 200][:2]
    for r in results:
        if r["drop"]:
            continue
        assert r["lines"][-1] == "data: [DONE]", r["lines"][-3:]
        payloads = [json.loads(line[6:]) for line in r["lines"][:-1]]
        assert not any("error" in p for p in payloads)
        if r["path"] == "/generate":
            assert payloads[-1]["meta_info"]["completion_tokens"] == 40
        else:
            assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    info = server.wait_idle()
    assert info["used_slots"] == info["tree_slots"] == info["evictable_slots"], info   # nothing held, no leak
    assert info["free_slots"] + info["tree_slots"] == info["max_total_num_tokens"]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


# ---- shutdown paths (their own servers, started together) ----

@pytest.fixture(scope="module")
def spare_servers(tiny_llama, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("lifecycle")
    servers = [ServerProcess(tiny_llama, log_dir, api_key=None) for _ in range(2)]
    try:
        yield [s.wait_ready() for s in servers]
    finally:
        for s in servers:
            s.stop()


def _background_streams(server, n: int) -> threading.Event:
    got_tokens = threading.Event()

    def run(i):
        body = {"input_ids": [5, 6, 7 + i], "stream": True, "sampling_params": {"max_new_tokens": 240,
                                                                                 "ignore_eos": True}}
        try:
            with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
                for line in r.iter_lines():
                    if line:
                        got_tokens.set()
        except requests.RequestException:
            pass

    for i in range(n):
        threading.Thread(target=run, args=(i,), daemon=True).start()
    return got_tokens


def test_sigterm_during_load_stops_all_processes(spare_servers):
    srv = spare_servers[0]
    kids = child_pids(srv.proc.pid)
    assert sorted("scheduler" in cmdline(p) or "detokenizer" in cmdline(p) for p in kids) == [True, True]
    assert _background_streams(srv, 8).wait(60)
    start = time.monotonic()
    os.kill(srv.proc.pid, signal.SIGTERM)
    srv.proc.wait(10)
    deadline = start + 10
    while any(alive(p) for p in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in kids), "orphaned child processes"
    assert srv.proc.returncode == 0
    assert time.monotonic() - start < 10


def test_killed_scheduler_gives_503_then_a_nonzero_exit(spare_servers):
    srv = spare_servers[1]
    kids = child_pids(srv.proc.pid)
    scheduler = next(p for p in kids if "scheduler" in cmdline(p))
    start = time.monotonic()
    os.kill(scheduler, signal.SIGKILL)
    saw_503 = False
    while srv.proc.poll() is None and time.monotonic() - start < 15:
        try:
            saw_503 |= requests.get(srv.url + "/health", timeout=1).status_code == 503
        except requests.RequestException:
            pass
        time.sleep(0.1)
    assert saw_503
    srv.proc.wait(max(0.1, 15 - (time.monotonic() - start)))
    assert srv.proc.returncode != 0
    assert not any(alive(p) for p in kids)
    assert "scheduler process exited" in srv.log()
