"""--thread-policy adaptive: fewer torch threads while other processes (or the hypervisor) keep cores busy.

A parallel region of N OpenMP threads ends when its slowest thread does, so on a host where another
process holds a core, a thread descheduled for a time slice stalls every region behind it and the
server collapses instead of slowing down in proportion.  Every `interval` seconds of work this reads
the CPU time the machine spent on other work (/proc/stat busy and steal time minus the server's own) and
runs max(1, cores left + margin) threads, at most `max_threads`.  It changes the count only when two
windows in a row agree on the direction, and then by the smaller of their two changes: one quiet moment
does not bring back the stalls, and one busy moment (a client on the same host tokenizing a burst of
long prompts: bench/serving.py's shared-prefix workload lost 28% of its throughput to a drop of one
window) does not halve the threads for the seconds after it.  The CPU time of the server's own processes (the parent that launched this scheduler and
all its descendants: HTTP front, detokenizer, compile workers, spinning threads included) does not
count as other work, so a quiet host keeps every thread.
"""

import logging
import os
import time
from typing import Callable, Optional, Tuple

logger = logging.getLogger(__name__)

MARGIN = 0.3   # a core that others use less than 70% of still gets a thread


def read_proc_stat() -> Optional[Tuple[float, float]]:
    """(busy seconds incl. steal, all seconds) summed over the machine's CPUs, or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)       # idle + iowait
    total = sum(fields[:8])                                         # user .. steal (guest is inside user)
    return (total - idle) / tick, total / tick


def family_cpu_seconds(root: int) -> float:
    """CPU seconds of process `root` and all its descendants (the server's processes), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()     # the command name may hold spaces
        except (OSError, IndexError):
            continue                                           # exited meanwhile
        pid = int(name)
        parent[pid], cpu[pid] = int(rest[1]), (int(rest[11]) + int(rest[12])) / tick   # ppid, utime + stime
    children: dict = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def threads_for(others_cores: float, cores: int, max_threads: int) -> int:
    """Threads to run when other work keeps `others_cores` of `cores` busy."""
    return max(1, min(max_threads, int(cores - others_cores + MARGIN)))


class ThreadGovernor:
    def __init__(self, max_threads: int, set_threads: Callable[[int], None], interval: float = 2.0,
                 cores: Optional[int] = None, root: Optional[int] = None, read_stat=read_proc_stat,
                 read_own=None, clock=time.monotonic):
        """root: the server's first process (default: this scheduler's parent); read_own() -> CPU seconds of
        the server's processes (default: of root and its descendants)."""
        self.max_threads, self.set_threads, self.interval = max_threads, set_threads, interval
        self.cores = cores or len(os.sched_getaffinity(0))
        root = root or os.getppid()
        self.read_stat, self.clock = read_stat, clock
        self.read_own = read_own or (lambda: family_cpu_seconds(root))
        self.threads = max_threads
        self.changes = 0
        self._pending: Optional[int] = None   # the thread count the last window asked for, if it differed
        self._last = self._sample()

    def _sample(self):
        stat = self.read_stat()
        return None if stat is None else (self.clock(), stat, self.read_own())

    def attach(self, scheduler) -> None:
        scheduler.after_step.append(self.maybe_adjust)

    def maybe_adjust(self) -> None:
        """Called after every scheduler step; acts once per interval."""
        if self._last is None or self.clock() - self._last[0] < self.interval:
            return
        now = self._sample()
        if now is None:
            return
        (_, (busy0, total0), own0), (_, (busy1, total1), own1) = self._last, now
        self._last = now
        if total1 <= total0:
            return
        # /proc/stat's seconds are summed over CPUs: the share of its total that others used, times cores
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (total1 - total0) * self.cores
        want = threads_for(others, self.cores, self.max_threads)
        pending, self._pending = self._pending, None
        if want == self.threads:
            return
        if pending is None or (pending > self.threads) != (want > self.threads):
            self._pending = want            # the first window of a change: wait for the next to agree
            return
        want = min(want, pending) if want > self.threads else max(want, pending)
        if want != self.threads:
            logger.info("other work keeps %.1f of %d cores busy: %d -> %d threads", others, self.cores,
                        self.threads, want)
            self.set_threads(want)
            self.threads, self.changes = want, self.changes + 1
