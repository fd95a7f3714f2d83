"""The disk tier through a real server: a server killed with SIGKILL while it writes loses nothing that
was on disk; the next server on the same folder serves the prefix from disk, with the same tokens, and
says so in meta_info.cached_tokens_details, /get_server_info and /metrics."""

import os
import random
import re
import signal
import time

import pytest
from server_harness import ServerProcess, child_pids

BLOCK = 32


def _generate(srv, ids, n=8):
    r = srv.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                                          "ignore_eos": True}})
    assert r.status_code == 200, r.text
    return r.json()


def _kill_tree(srv):
    for pid in child_pids(srv.proc.pid) + [srv.proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    srv.proc.wait(timeout=30)


def test_restart_after_sigkill_serves_from_disk(tiny_llama, tmp_path):
    rng = random.Random(0)
    prompt = [rng.randrange(3, 300) for _ in range(200)]
    other = [rng.randrange(3, 300) for _ in range(200)]
    opts = ("--kv-disk-dir", str(tmp_path / "kv"), "--kv-disk-block", str(BLOCK))
    first = ServerProcess(tiny_llama, tmp_path, *opts, "--check-ledger").wait_ready()
    try:
        cold = _generate(first, prompt)
        assert cold["meta_info"]["cached_tokens_details"] == {"device": 0, "host": 0, "disk": 0}
        deadline = time.monotonic() + 60
        while first.server_info()["disk_blocks"] < len(prompt) // BLOCK and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.server_info()["disk_blocks"] >= len(prompt) // BLOCK
        # a request whose blocks are being written when the whole server is killed
        first.post("/generate", json={"input_ids": other, "sampling_params": {"max_new_tokens": 1}})
    finally:
        _kill_tree(first)

    second = ServerProcess(tiny_llama, tmp_path, *opts, "--check-ledger").wait_ready()
    try:
        warm = _generate(second, prompt)
        assert warm["output_ids"] == cold["output_ids"]
        details = warm["meta_info"]["cached_tokens_details"]
        assert details["disk"] == len(prompt) - 1 == warm["meta_info"]["cached_tokens"]   # whole blocks + tail
        assert details["device"] == 0
        assert _generate(second, other)["meta_info"]["finish_reason"]["type"] == "length"
        again = _generate(second, prompt)      # now in memory
        assert again["output_ids"] == cold["output_ids"]
        assert again["meta_info"]["cached_tokens_details"]["disk"] == 0
        info = second.server_info()
        assert info["disk_loaded_tokens"] >= details["disk"] and info["disk_corrupt"] == 0
        metrics = second.get("/metrics").text
        assert "radixlm_kv_disk_loaded_tokens" in metrics and "radixlm_kv_disk_writable 1.0" in metrics
        assert not list((tmp_path / "kv").rglob("*.tmp*"))   # torn temporaries of the killed server are gone
    finally:
        assert second.stop() == 0


def _drain_line(log: str) -> tuple:
    """(queued, written, dropped) of the scheduler's last 'stopping with ...' line."""
    found = re.findall(r"stopping with (\d+) queued block writes \(\d+ of them [^)]*\): (\d+) written, (\d+) dropped", log)
    assert found, log[-3000:]
    return tuple(map(int, found[-1]))


def test_sigterm_drains_queued_writes(tiny_llama, tmp_path):
    """A burst of one-token blocks (about 1,700 files) is still queued when every process of the server
    gets SIGTERM at once (a service manager's stop): the scheduler finishes the writes and exits 0, and the
    next server serves every prompt from disk.  Stopping that one with SIGINT (Ctrl-C) goes the same way."""
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 300) for _ in range(240)] for _ in range(7)]
    opts = ("--kv-disk-dir", str(tmp_path / "kv"), "--kv-disk-block", "1", "--max-prefill-tokens", "2048",
            "--chunked-prefill-size", "2048")
    first = ServerProcess(tiny_llama, tmp_path, *opts).wait_ready()
    try:
        pids = child_pids(first.proc.pid) + [first.proc.pid]
        r = first.post("/generate", json={"input_ids": prompts, "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        assert r.status_code == 200, r.text
        cold = [o["output_ids"] for o in r.json()]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        assert first.proc.wait(timeout=30) == 0
    finally:
        first.stop()
    queued, written, dropped = _drain_line(first.log())
    assert queued > 0 and written == queued and dropped == 0
    assert "exited with code" not in first.log()
    assert not list((tmp_path / "kv").rglob("*.tmp*"))

    second = ServerProcess(tiny_llama, tmp_path, *opts).wait_ready()
    try:
        for ids, want in zip(prompts, cold):
            out = _generate(second, ids, n=1)
            assert out["output_ids"] == want
            assert out["meta_info"]["cached_tokens_details"]["disk"] == len(ids) - 1
        second.proc.send_signal(signal.SIGINT)
        assert second.proc.wait(timeout=30) == 0
    finally:
        second.stop()
    assert _drain_line(second.log())[2] == 0


def test_host_tier_serves_evicted_prefix(tiny_llama, tmp_path, monkeypatch):
    """A CPU server refuses --kv-host-size (naming the flag) unless RADIXLM_KV_HOST_ON_CPU=1; with it, a
    prefix the 512-token device pool evicted comes back from the host tier: same tokens, reported in
    cached_tokens_details.host, /get_server_info and /metrics."""
    opts = ("--kv-host-size", "8M", "--kv-disk-block", str(BLOCK), "--max-total-tokens", "512", "--check-ledger")
    with pytest.raises(RuntimeError, match="--kv-host-size"):
        ServerProcess(tiny_llama, tmp_path, *opts).wait_ready()
    monkeypatch.setenv("RADIXLM_KV_HOST_ON_CPU", "1")
    rng = random.Random(3)
    prompts = [[3 + i] + [rng.randrange(3, 300) for _ in range(199)] for i in range(4)]   # no shared first token
    srv = ServerProcess(tiny_llama, tmp_path, *opts).wait_ready()
    try:
        cold = [_generate(srv, p) for p in prompts]
        warm = _generate(srv, prompts[0])
        assert warm["output_ids"] == cold[0]["output_ids"]
        whole = (len(prompts[0]) - 1) // BLOCK * BLOCK
        assert warm["meta_info"]["cached_tokens_details"] == {"device": 0, "host": whole, "disk": 0}
        info = srv.server_info()
        assert info["host_loaded_tokens"] == whole and info["host_blocks"] > 0
        assert f"radixlm_kv_host_loaded_tokens {float(whole)}" in srv.get("/metrics").text
    finally:
        assert srv.stop() == 0
