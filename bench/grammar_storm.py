"""Slow grammar compiles against everyone else: does a storm of huge enum schemas delay a trivial regex
and free decoding, and do the server's CPU and memory come back after the compiles time out?

Launches `radixlm serve` (the default model unless --server-args says otherwise), measures the latency
of a trivial regex request and a free request unloaded, then again while N distinct 20,000-value enum
schemas are being compiled, and samples the CPU time and RSS of the scheduler process and its
children (the compile worker) until --settle seconds after the last slow request was answered.

    python bench/grammar_storm.py [--slow 6] [--enum-size 20000] [--server-args "--grammar-timeout 5"]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_info, print_table, write_json  # noqa: E402
from serving_launch import LaunchedServer  # noqa: E402

REGEX = {"text": "Answer yes or no: is the sky blue?", "sampling_params": {"regex": "(yes|no)", "max_new_tokens": 4,
                                                                            "temperature": 0}}
FREE = {"text": "Write one sentence about the sea.", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}


def post(url: str, body: dict, timeout: float = 600) -> tuple[int, float]:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.perf_counter() - start


def slow_body(i: int, size: int) -> dict:
    schema = {"type": "object", "required": ["code"], "properties": {
        "code": {"enum": [f"v{i}_{k}_{k * 7919 % 10007}" for k in range(size)]}}}
    return {"text": "Pick a code.", "sampling_params": {"json_schema": json.dumps(schema), "max_new_tokens": 8}}


def descendants(pid: int) -> list:
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _is_scheduler(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"radixlm.runtime.child" in argv and b"scheduler" in argv


def usage(pids: list) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) summed over pids that still exist."""
    tick, cpu, rss = os.sysconf("SC_CLK_TCK"), 0.0, 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            with open(f"/proc/{p}/status") as f:
                rss += next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
        except (OSError, StopIteration, ValueError):
            continue
    return cpu, rss


def latencies(url: str, body: dict, n: int) -> list:
    out = []
    for _ in range(n):
        status, seconds = post(url, body)
        if status != 200:
            raise RuntimeError(f"a light request failed with HTTP {status}")
        out.append(seconds)
    return out


def run(args) -> dict:
    server = LaunchedServer(args.server_args, Path(tempfile.mkdtemp(prefix="storm-")), 0)
    try:
        server.wait_ready(600, {})
        scheduler = next(p for p in descendants(server.proc.pid) if _is_scheduler(p))
        post(server.url, REGEX), post(server.url, FREE)             # warm-up
        base = {"regex": latencies(server.url, REGEX, args.repeat), "free": latencies(server.url, FREE, args.repeat)}
        cpu0, rss0 = usage(descendants(scheduler))
        slow_results, threads = [], []
        for i in range(args.slow):
            t = threading.Thread(target=lambda i=i: slow_results.append(post(server.url, slow_body(i, args.enum_size))))
            t.start()
            threads.append(t)
        time.sleep(1.0)
        storm = {"regex": latencies(server.url, REGEX, args.repeat), "free": latencies(server.url, FREE, args.repeat)}
        for t in threads:
            t.join()
        answered = time.monotonic()
        samples = []
        while time.monotonic() - answered < args.settle:
            c1, _ = usage(descendants(scheduler))
            time.sleep(1.0)
            c2, rss = usage(descendants(scheduler))
            samples.append({"after_s": round(time.monotonic() - answered, 1), "cpu_pct": round(100 * (c2 - c1), 1),
                            "rss_mib": round(rss, 1)})
    finally:
        server.stop()
    rows = [{"kind": k, "unloaded_s": statistics.median(base[k]), "storm_s": statistics.median(storm[k]),
             "ratio": statistics.median(storm[k]) / statistics.median(base[k])} for k in ("regex", "free")]
    return {"rows": rows, "slow_status": sorted(s for s, _ in slow_results),
            "slow_seconds": sorted(round(t, 1) for _, t in slow_results), "rss_before_mib": round(rss0, 1),
            "cpu_before_s": round(cpu0, 1), "settle": samples, "machine": machine_info(), "args": vars(args)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-args", default="--grammar-timeout 5", help="radixlm serve options")
    ap.add_argument("--slow", type=int, default=6, help="distinct slow enum schemas sent at once")
    ap.add_argument("--enum-size", type=int, default=20000, help="values in each slow enum")
    ap.add_argument("--repeat", type=int, default=3, help="light requests per measurement (median)")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds sampled after the last slow answer")
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args()
    result = run(args)
    print_table(result["rows"], [("kind", "request", "{}"), ("unloaded_s", "unloaded s", "{:.2f}"),
                                 ("storm_s", "during storm s", "{:.2f}"), ("ratio", "ratio", "{:.2f}")])
    print(f"slow requests: HTTP {result['slow_status']}, answered after {result['slow_seconds']} s")
    print(f"scheduler + workers before the storm: RSS {result['rss_before_mib']} MiB")
    for s in result["settle"]:
        print(f"  {s['after_s']:>5.1f} s after the last slow answer: CPU {s['cpu_pct']:5.1f}%  RSS {s['rss_mib']} MiB")
    print(f"CPU: {result['machine'].get('cpu')}, load {result['machine'].get('loadavg_1_5_15')}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
