"""Grammar compiles in two lanes; a long grammar is first tried in a worker process that can be killed.

XGrammar cannot interrupt a compile inside a thread, and shipping a compiled grammar between
processes costs more than compiling it (its token-mask cache serializes to hundreds of MB).  So:
- fast lane: grammars of at most `slow_lane_chars` characters compile in this process, on a small
  thread pool (they compile in milliseconds: XGrammar keeps even `[a-z]{1,60000}` under a second);
- slow lane: a longer grammar (a 20,000-value enum) is first compiled by `compile_worker`, a child
  process, which is killed once the compile has used `timeout_s` of CPU time, or WALL_FACTOR times that in
  wall time (it runs niced, so a host busy decoding makes it wait; CPU and memory come back at once); only a grammar that
  compiled there in time is compiled again here, on the lane's one thread.  Slow grammars thus
  queue behind each other, never in front of a short regex, and a hopeless one costs one timeout;
- quick lane: kinds that compile in milliseconds whatever their size (llguidance's, which builds masks
  lazily: the second engine of `auto` after an XGrammar timeout) never wait behind XGrammar compiles.
`submit(key)` returns a Future of a `backend.Compiled` whose `deadline` (monotonic seconds) is set
once its compile in this process starts: waiting in a lane does not count against it, compiling does.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from radixlm.constrained.compile_worker import read_frame, write_frame

logger = logging.getLogger(__name__)

SLOW_LANE_CHARS = 32768
QUICK_DEADLINE_FACTOR = 4
STARTUP_TIMEOUT_S = 300.0          # a worker imports xgrammar (and torch) first: slow on a busy host
WALL_FACTOR = 6                    # a worker's compile is stopped at its CPU timeout, or at this many in wall time
CPU_POLL_S = 0.1
_prespawned: list[subprocess.Popen] = []
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads (Linux /proc), or None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def spawn_worker() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "radixlm.constrained.compile_worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)


def prespawn_worker() -> None:
    """Start a worker process now, before the model loads, so its imports (seconds of CPU) are done by the time
    the server takes requests; the first ProbeWorker to start takes it."""
    _prespawned.append(spawn_worker())


class ProbeWorker:
    """One compile_worker process, started on first use and again after each kill."""

    def __init__(self, hello: dict, timeout_s: float):
        self.hello, self.timeout_s = hello, timeout_s
        self.proc: subprocess.Popen | None = None
        self.killed = 0                      # compiles stopped at their deadline
        self.closing = False

    def _start(self) -> None:
        self.proc = _prespawned.pop() if _prespawned else spawn_worker()
        write_frame(self.proc.stdin, self.hello)
        ready, _, _ = select.select([self.proc.stdout], [], [], STARTUP_TIMEOUT_S)
        if not ready or read_frame(self.proc.stdout) != ["ready"]:
            logger.error("the grammar compile worker did not start")
            self.stop()

    def stop(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for f in (proc.stdin, proc.stdout):
            f.close()
        return code

    def warm(self) -> None:
        if self.proc is None:
            self._start()

    def probe(self, key: tuple) -> None:
        """Compile key in the worker within timeout_s; raises GrammarError when it fails or is too slow."""
        from radixlm.constrained.errors import GrammarError, GrammarTimeout

        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self._start()
            if self.proc is None:
                raise GrammarError("grammar compilation failed: the compile worker could not start")
        write_frame(self.proc.stdin, [key[0], key[1]])
        if not self._answers_in_time(self.proc):
            self.killed += 1
            self.stop()
            logger.warning("grammar compile stopped at the %g s timeout (%d characters)", self.timeout_s, len(key[1]))
            raise GrammarTimeout(f"grammar compilation timed out after {self.timeout_s:g} s (the server's "
                                 f"--grammar-timeout); simplify the schema")
        reply = read_frame(self.proc.stdout)
        if reply is None:
            code = self.stop()
            raise GrammarError("the grammar backend is shutting down" if self.closing else
                               f"grammar compilation failed: the compile worker exited with code {code}")
        if reply[0] != "ok":
            raise GrammarError(reply[1])

    def _answers_in_time(self, proc) -> bool:
        """Whether the worker answers before it has spent timeout_s of CPU time on the compile, and within
        WALL_FACTOR timeouts of wall time.  The worker runs niced, so on a host whose cores decode it may wait
        for a core: that waiting is not the grammar's cost (a schema compiled in 1 s of CPU was refused after 5 s
        of wall time beside 16 decoding requests).  Wall time alone where the OS does not say (no /proc)."""
        started, spent = time.monotonic(), cpu_seconds(proc.pid)
        while True:
            waited = time.monotonic() - started
            used = waited if spent is None else (cpu_seconds(proc.pid) or spent) - spent
            left = min(self.timeout_s - used, WALL_FACTOR * self.timeout_s - waited)
            if left <= 0:
                return False
            ready, _, _ = select.select([proc.stdout], [], [], min(left, CPU_POLL_S))
            if ready:
                return True

    def close(self) -> None:
        self.closing = True
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()


class CompilePool:
    def __init__(self, compile_fn, hello: dict, timeout_s: float, fast_workers: int = 2,
                 slow_lane_chars: int = SLOW_LANE_CHARS, quick_kinds: tuple = ()):
        self.compile_fn = compile_fn         # key -> Compiled, in this process
        self.slow_lane_chars = slow_lane_chars
        self.quick_kinds = quick_kinds       # kinds that compile in milliseconds whatever their size: own lane
        self.fast = ThreadPoolExecutor(max_workers=fast_workers, thread_name_prefix="grammar-fast")
        self.slow = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-slow")
        self.quick = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-quick")
        self.worker = ProbeWorker(hello, timeout_s)

    def lane_of(self, key: tuple) -> str:
        if key[0] in self.quick_kinds:
            return "quick"
        return "slow" if len(key[1]) > self.slow_lane_chars else "fast"

    def warm(self) -> Future:
        """Start the worker now (it imports xgrammar: seconds) instead of at the first long grammar; the
        future is done once it answered ready or failed to start (then it is started again at first use)."""
        return self.slow.submit(self.worker.warm)

    def submit(self, key: tuple) -> Future:
        fut: Future = Future()
        fut.deadline = None
        lane = self.lane_of(key)
        getattr(self, lane).submit(self._run, key, fut, lane == "slow")
        return fut

    def _run(self, key: tuple, fut: Future, slow: bool) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        # a quick-lane compile is the last resort after a timeout, sharing the cores with the XGrammar
        # compile still running: it gets QUICK_DEADLINE_FACTOR timeouts
        factor = QUICK_DEADLINE_FACTOR if key[0] in self.quick_kinds else WALL_FACTOR if slow else 1
        fut.deadline = time.monotonic() + factor * self.worker.timeout_s   # the worker keeps to its CPU time
        try:
            if slow:
                self.worker.probe(key)
                fut.deadline = time.monotonic() + self.worker.timeout_s
            fut.set_result(self.compile_fn(key))
        except BaseException as exc:
            fut.set_exception(exc)

    def shutdown(self) -> None:
        self.worker.close()
        for pool in (self.fast, self.slow, self.quick):
            pool.shutdown(wait=False, cancel_futures=True)
        threading.Thread(target=self.worker.stop, daemon=True).start()
