"""`radixlm serve --tp-size 2`: serves (greedy tokens equal the shared single-process `server`, the oracle), and
killing the tp worker rank ends the server non-zero within 15 s with no process left (/proc)."""

import os
import signal
import subprocess
import sys
import time

import pytest
from server_harness import ServerProcess, child_pids, cmdline, free_port, kill_child_and_expect_exit

BODY = {"input_ids": [5, 17, 42, 99, 3, 250, 7], "sampling_params": {"max_new_tokens": 8, "temperature": 0,
                                                                     "ignore_eos": True}}


@pytest.fixture(scope="module")
def tp_server(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("tp-logs"), "--tp-size", "2").wait_ready()
    yield srv
    srv.stop()


def test_tp2_greedy_tokens_equal_a_single_process(tp_server, server):
    got = tp_server.post("/generate", BODY)
    want = server.post("/generate", BODY)
    assert got.status_code == want.status_code == 200
    assert got.json()["output_ids"] == want.json()["output_ids"]


def test_killing_the_tp_worker_ends_the_server_without_orphans(tp_server):
    """Last in this file: it ends the module's server."""
    kids = child_pids(tp_server.proc.pid)
    workers = [p for p in kids if "tp_worker" in cmdline(p)]
    assert len(workers) == 1 and any(" scheduler " in cmdline(p) for p in kids)
    kill_child_and_expect_exit(tp_server, workers[0], kids)
    assert "tp-worker-1 process exited" in tp_server.log()



def _start_two_nodes(model, tmp_path):
    """--nnodes 2 on one host: node 0 (a ServerProcess) serves rank 0, node 1 (`serve --node-rank 1`) runs rank 1."""
    addr = ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}"]
    log = open(tmp_path / "node1.log", "wb")
    node1 = subprocess.Popen([sys.executable, "-m", "radixlm.runtime.cli", "serve", "--model", str(model),
                              "--dtype", "float32", "--max-total-tokens", "2048", "--num-threads", "1", *addr,
                              "--node-rank", "1"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        return ServerProcess(model, tmp_path, *addr, "--node-rank", "0").wait_ready(), node1
    except BaseException:
        node1.kill()
        node1.wait()
        raise


def _end(node0, node1) -> None:
    if node0.proc.poll() is None:
        node0.stop()
    if node1.poll() is None:
        node1.kill()
        node1.wait()


def test_two_nodes_serve_and_node_1_ends_when_node_0_stops(tiny_llama, tmp_path, server):
    node0, node1 = _start_two_nodes(tiny_llama, tmp_path)
    try:
        got, want = node0.post("/generate", BODY), server.post("/generate", BODY)
        assert got.status_code == 200 and got.json()["output_ids"] == want.json()["output_ids"]
        assert node0.stop() == 0
        assert node1.wait(15) == 0, "node 1 must end (code 0: rank 0 sent STOP) when node 0 stops"
        assert "stop after" in (tmp_path / "node1.log").read_text()
    finally:
        _end(node0, node1)


def test_an_idle_node_0_ends_when_the_rank_on_node_1_is_killed(tiny_llama, tmp_path):
    """Node 0 cannot see node 1's processes: rank 0's heartbeat over the step channel finds the rank gone."""
    node0, node1 = _start_two_nodes(tiny_llama, tmp_path)
    try:
        worker = next(p for p in child_pids(node1.pid) if "tp_worker" in cmdline(p))
        start = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        assert node0.proc.wait(15) != 0 and time.monotonic() - start < 15
        assert node1.wait(5) != 0
        assert "a tensor parallel rank is gone" in node0.log()
    finally:
        _end(node0, node1)
