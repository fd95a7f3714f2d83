"""Starting the servers bench/serving.py measures: `radixlm serve` options or any command line, on a free
port, in their own process group."""

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

# ---------------------------------------------------------------- launching servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchedServer:
    """A server subprocess in its own session on a free port.  ARGS starting with '-' are `radixlm serve`
    options; anything else is a whole command line in which {port} is replaced."""

    def __init__(self, spec: str, log_dir: Path, index: int):
        self.port = free_port()
        self.spec = spec
        if spec.lstrip().startswith("-"):
            cmd = [sys.executable, "-m", "radixlm.runtime.cli", "serve", *shlex.split(spec), "--port", str(self.port)]
        else:
            if "{port}" not in spec:
                raise ValueError("a --launch command that is not radixlm options must contain {port}")
            cmd = shlex.split(spec.replace("{port}", str(self.port)))
        self.cmd = cmd
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"server-{index}-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, n=3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float, headers: dict) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            if self._answers_ready(headers):
                return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"server not ready in {timeout:.0f} s:\n{self.log_tail()}")

    def _answers_ready(self, headers: dict) -> bool:
        """/v1/models answers 200; or, where it is missing (404), /health does.  A gateway's /health answers
        200 before it has a worker, its /v1/models 503 until then."""
        import urllib.error
        import urllib.request
        for path in ("/v1/models", "/health"):
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=2) as r:
                    return r.status == 200
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    return False
            except Exception:
                return False
        return False

    def _poke(self) -> None:
        import urllib.request
        with contextlib.suppress(Exception):
            urllib.request.urlopen(self.url + "/health", timeout=1).read()

    def stop(self) -> Optional[int]:
        """SIGTERM, then SIGINT, then SIGKILL to the whole process group (every process this started)."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGINT, 10.0)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            self._poke()   # an idle event loop may only run its signal handler once woken
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)   # leftovers of our own process group only
        code = self.proc.wait()
        self._log.close()
        return code


def launch_specs(args) -> list:
    """[(label, spec)] of the servers to start, or [] to use --base-url."""
    specs = [(f"launch {i + 1}", s) for i, s in enumerate(args.launch or [])]
    base = args.server_args
    if args.compare_radix:
        specs += [("radix cache on", base), ("radix cache off", base + " --disable-radix-cache")]
    if args.chunk_sizes:
        specs += [(f"chunk {c}", f"{base} --chunked-prefill-size {c}") for c in args.chunk_sizes.split(",")]
    return specs
