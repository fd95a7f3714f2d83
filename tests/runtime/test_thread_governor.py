"""--thread-policy adaptive: the decision rule against hand-made CPU counters, then the real counters
under real competing processes."""

import os
import subprocess
import sys
import time

import pytest

from radixlm.runtime.scheduler.thread_governor import ThreadGovernor, family_cpu_seconds, read_proc_stat, threads_for

BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"


class Counters:
    """A machine of `cores` CPUs where, each second, others use `others` cores and the server `own`."""

    def __init__(self, cores=2):
        self.cores, self.t, self.busy, self.total, self.own_s = cores, 0.0, 0.0, 0.0, 0.0

    def advance(self, seconds, others, own):
        self.t += seconds
        self.busy += (others + own) * seconds
        self.total += self.cores * seconds
        self.own_s += own * seconds

    def governor(self, max_threads, calls, interval=2.0):
        return ThreadGovernor(max_threads, calls.append, interval=interval, cores=self.cores,
                              read_stat=lambda: (self.busy, self.total), read_own=lambda: self.own_s,
                              clock=lambda: self.t)


@pytest.mark.parametrize("others,cores,max_threads,want", [
    (0.0, 2, 2, 2), (0.5, 2, 2, 1), (0.6, 2, 2, 1), (0.2, 2, 2, 2), (1.0, 2, 2, 1), (2.0, 2, 2, 1),
    (1.0, 8, 8, 7), (3.5, 8, 4, 4), (6.0, 8, 8, 2)])
def test_threads_for(others, cores, max_threads, want):
    assert threads_for(others, cores, max_threads) == want


def test_changes_after_two_agreeing_windows_and_ignores_its_own_work():
    m, calls = Counters(), []
    g = m.governor(2, calls)
    m.advance(2.0, others=0.0, own=2.0)          # the server alone, every core busy with its own threads
    g.maybe_adjust()
    assert (g.threads, calls) == (2, [])
    m.advance(1.0, others=1.0, own=1.0)          # within the interval: no decision yet
    g.maybe_adjust()
    assert calls == []
    m.advance(1.0, others=1.0, own=1.0)          # one busy window is not enough
    g.maybe_adjust()
    assert (g.threads, calls) == (2, [])
    m.advance(2.0, others=1.0, own=1.0)
    g.maybe_adjust()
    assert (g.threads, calls) == (1, [1])
    m.advance(2.0, others=0.0, own=1.0)          # one quiet window is not enough
    g.maybe_adjust()
    assert g.threads == 1
    m.advance(2.0, others=0.0, own=1.0)
    g.maybe_adjust()
    assert (g.threads, calls) == (2, [1, 2])
    m.advance(2.0, others=0.0, own=2.0)
    g.maybe_adjust()
    assert calls == [1, 2] and g.changes == 2


def test_a_burst_of_one_window_keeps_the_threads():
    m, calls = Counters(), []
    g = m.governor(2, calls)
    for others in (0.0, 0.6, 0.0, 0.0, 1.2, 0.1, 0.0):     # a client's bursts, each within one window
        m.advance(2.0, others=others, own=1.5)
        g.maybe_adjust()
    assert (g.threads, calls) == (2, [])


def test_a_raise_interrupted_by_load_does_not_happen():
    m, calls = Counters(), []
    g = m.governor(2, calls)
    for _ in range(2):
        m.advance(2.0, others=1.0, own=1.0)
        g.maybe_adjust()
    m.advance(2.0, others=0.0, own=1.0)          # quiet once ...
    g.maybe_adjust()
    m.advance(2.0, others=1.0, own=1.0)          # ... then busy again: stays at 1, and the count restarts
    g.maybe_adjust()
    m.advance(2.0, others=0.0, own=1.0)
    g.maybe_adjust()
    assert (g.threads, calls) == (1, [1])


def test_never_above_its_maximum_nor_below_one():
    m, calls = Counters(cores=8), []
    g = m.governor(4, calls)
    for others in (0.0, 0.0, 7.9, 7.9, 7.9, 0.0, 0.0):
        m.advance(2.0, others=others, own=0.1)
        g.maybe_adjust()
        assert 1 <= g.threads <= 4
    assert calls == [1, 4]


def test_family_cpu_counts_descendants():
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    before, mine = family_cpu_seconds(os.getpid()), os.times()
    subprocess.run([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
                   check=True)   # a grandchild burns the CPU
    # a reaped child's time leaves the tree (it moves to our cutime), so compare with what the shell saw
    used = os.times()
    assert used.children_user + used.children_system - mine.children_user - mine.children_system >= 0.5
    assert family_cpu_seconds(os.getpid()) - before < 0.3   # our own process was idle meanwhile
    proc = subprocess.Popen([sys.executable, "-c", burn])
    try:
        deadline = time.monotonic() + 60
        while family_cpu_seconds(os.getpid()) - before < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)   # a live child counts while it runs
        assert family_cpu_seconds(os.getpid()) - before >= 0.4
    finally:
        proc.wait(60)


def _others_cores(seconds: float) -> float:
    """Cores kept busy by everything but this process over the next `seconds`."""
    (busy0, total0), own0 = read_proc_stat(), sum(os.times()[:2])
    time.sleep(seconds)
    (busy1, total1), own1 = read_proc_stat(), sum(os.times()[:2])
    return max(0.0, busy1 - busy0 - (own1 - own0)) / max(total1 - total0, 1e-9) * len(os.sched_getaffinity(0))


@pytest.mark.skipif(read_proc_stat() is None, reason="no /proc/stat on this machine")
def test_real_competing_processes_take_threads_away_and_give_them_back():
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("one core: there is no thread to take away")
    quiet = _others_cores(1.0) < 0.3     # else other work on the host may keep a core busy after ours stop
    calls = []
    g = ThreadGovernor(cores, calls.append, interval=0.5, root=os.getpid(),
                       read_own=lambda: sum(os.times()[:2]))    # the competitors below are not the server's
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(cores)]
    try:
        deadline = time.monotonic() + 30
        while g.threads > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            g.maybe_adjust()
        assert g.threads == 1 and calls[-1] == 1
    finally:
        for p in busy:
            p.kill()
            p.wait()
    if not quiet:
        pytest.skip("threads were taken away; giving them back is only checked on a host that was quiet before")
    deadline = time.monotonic() + 30
    while g.threads < cores and time.monotonic() < deadline:
        time.sleep(0.1)
        g.maybe_adjust()
    assert g.threads == cores and calls[-1] == cores
