"""Helpers for the server tests: a real `radixlm serve` subprocess on a free port, and /proc lookups."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import requests

API_KEY = "sk-radixlm-test"
MAX_TOTAL_TOKENS = 2048
CONTEXT_LENGTH = 256          # the tiny model's max_position_embeddings
READY_TIMEOUT_S = 300


def load_make_tiny_model():
    """make_tiny_model from tests/tiny_models.py."""
    from tiny_models import make_tiny_model
    return make_tiny_model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_pids(pid: int) -> list:
    """Direct children of pid, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True unless the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_child_and_expect_exit(server, victim: int, kids: list, timeout: float = 15.0) -> None:
    """SIGKILL the server's child `victim`: /health answers 503, the server exits non-zero within
    `timeout` seconds, and none of its children (`kids`, listed before) is left behind."""
    start = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    saw_503 = False
    while server.proc.poll() is None and time.monotonic() - start < timeout:
        try:
            saw_503 |= requests.get(server.url + "/health", timeout=1).status_code == 503
        except requests.RequestException:
            pass
        time.sleep(0.1)
    server.proc.wait(max(0.1, timeout - (time.monotonic() - start)))
    assert server.proc.returncode != 0 and saw_503
    deadline = time.monotonic() + 2
    while any(alive(p) for p in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in kids), "orphaned child processes"


class ServerProcess:
    def __init__(self, model, log_dir, *extra, api_key=API_KEY):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = pathlib.Path(log_dir) / f"server-{self.port}.log"
        cmd = [sys.executable, "-m", "radixlm.runtime.cli", "serve", "--model", str(model), "--port",
               str(self.port), "--dtype", "float32", "--max-total-tokens", str(MAX_TOTAL_TOKENS),
               "--num-threads", "1", "--log-interval", "2", *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"server not ready in {timeout} s:\n{self.log()[-4000:]}")

    def get(self, path, **kw):
        return requests.get(self.url + path, headers=self.headers, timeout=kw.pop("timeout", 60), **kw)

    def post(self, path, json=None, **kw):
        """POST a JSON body ({} when none is given: the server refuses POSTs without a JSON content type)."""
        return requests.post(self.url + path, json={} if json is None else json, headers=self.headers,
                             timeout=kw.pop("timeout", 120), **kw)

    def server_info(self) -> dict:
        r = self.get("/get_server_info")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_idle(self, timeout: float = 60.0) -> dict:
        """server_info once nothing runs or waits."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.server_info()
            if info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0:
                return info
            assert time.monotonic() < deadline, f"still busy after {timeout} s: {info}"
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
