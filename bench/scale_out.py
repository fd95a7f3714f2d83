"""Scale-out on one machine (issue 15 item 4): bench/serving.py's shared-prefix and multi-turn
workloads through (a) one radixlm server with all the threads, (b) `--dp-size N` with
--threads-per-replica threads each, and (c) N servers of --threads-per-replica threads behind the SGLang
model gateway (`smg`, from `make tools`) with each of --gateway-policies (the same cores in all), in one
run; throughput, TTFT p50/p99 and prompt cache hit rate of each (behind the gateway, from the
responses' cached_tokens).

    .venv/bin/python bench/scale_out.py --server-args "--model smollm2-135m-instruct --dtype float32" \\
        --num-requests 48 --concurrency 16 --out bench/results/scale_out.json

Options it does not know go to bench/serving.py unchanged (e.g. --system-prompt-len, --turns,
--input-len, --question-len).  Run (c) is bench/gateway_pair.py through serving.py's --launch.
"""

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving  # noqa: E402
from _common import machine_info  # noqa: E402

WORKLOADS = ("shared-prefix", "multi-turn")
GATEWAY_PAIR = Path(__file__).resolve().parent / "gateway_pair.py"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/scale_out.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-args", default=serving.DEFAULT_SERVER_ARGS, help="radixlm serve options of every run")
    p.add_argument("--dp-size", type=int, default=2, help="replicas of run (b) (default: 2)")
    p.add_argument("--threads-per-replica", type=int, default=1,
                   help="--num-threads of each replica in (b); run (a) gets dp-size times as many (default: 1)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated (default: both)")
    p.add_argument("--num-requests", type=int, default=48, help="per workload and run (default: 48)")
    p.add_argument("--concurrency", type=int, default=16, help="sessions in flight (default: 16)")
    p.add_argument("--num-prefixes", type=int, default=4, help="shared-prefix: distinct system prompts (default: 4)")
    p.add_argument("--output-len", type=int, default=32, help="max output tokens (default: 32)")
    p.add_argument("--gateway-policies", default="cache_aware,round_robin",
                   help="smg --policy of each run (c), comma-separated; empty for none (default: %(default)s)")
    p.add_argument("--out", default=None, help="write the JSON report here")
    return p


def configs(args) -> list:
    threads = args.dp_size * args.threads_per_replica
    return [(f"one server, {threads} threads", f"{args.server_args} --num-threads {threads}"),
            (f"dp {args.dp_size} x {args.threads_per_replica} threads",
             f"{args.server_args} --dp-size {args.dp_size} --num-threads {args.threads_per_replica}")] + [
        (f"smg {policy}, {args.dp_size} x {args.threads_per_replica}",
         f"{shlex.quote(sys.executable)} {shlex.quote(str(GATEWAY_PAIR))} --port {{port}} --policy {policy} "
         f"--workers {args.dp_size} --server-args "
         f"{shlex.quote(args.server_args + ' --num-threads ' + str(args.threads_per_replica))}")
        for policy in filter(None, args.gateway_policies.split(","))]


def row(workload: str, label: str, s: dict) -> dict:
    hit = (s.get("metrics_cache") or {}).get("hit_rate")
    return {"workload": workload, "run": label, "completed": s["completed"], "failed": s["failed"],
            "request_throughput": s["request_throughput"], "output_throughput": s["output_throughput"],
            "ttft_p50_ms": (s["ttft_ms"] or {}).get("p50"), "ttft_p99_ms": (s["ttft_ms"] or {}).get("p99"),
            "hit_rate": hit if hit is not None else s.get("response_cache_hit_rate")}


def print_table(rows: list) -> None:
    cols = [("workload", 15), ("run", 30), ("ok", 5), ("req/s", 8), ("out tok/s", 10), ("TTFT p50", 10),
            ("TTFT p99", 10), ("hit rate", 9)]
    print("\n" + "".join(f"{n:<{w}}" if i < 2 else f"{n:>{w}}" for i, (n, w) in enumerate(cols)))

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    for r in rows:
        vals = [r["workload"], r["run"], r["completed"], f(r["request_throughput"], ".3f"),
                f(r["output_throughput"], ".1f"), f(r["ttft_p50_ms"], ".0f"), f(r["ttft_p99_ms"], ".0f"),
                f(None if r["hit_rate"] is None else 100 * r["hit_rate"], ".1f")]
        print("".join(f"{str(v):<{w}}" if i < 2 else f"{str(v):>{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))


def main(argv=None) -> int:
    args, passthrough = build_parser().parse_known_args(argv)
    runs = configs(args)
    tmp = Path(tempfile.mkdtemp(prefix="radixlm-scale-out-"))
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
              "machine": machine_info(), "config": vars(args), "passthrough": passthrough, "rows": [],
              "serving_reports": {}}
    code = 0
    for workload in args.workloads.split(","):
        out = tmp / f"{workload}.json"
        serving_argv = ["--workload", workload, "--num-requests", str(args.num_requests), "--concurrency",
                        str(args.concurrency), "--output-len", str(args.output_len), "--disable-tqdm",
                        "--out", str(out), *passthrough]
        if workload == "shared-prefix":
            serving_argv += ["--num-prefixes", str(args.num_prefixes)]
        for _, spec in runs:
            serving_argv += ["--launch", spec]
        code |= serving.main(serving_argv)
        result = json.loads(out.read_text())
        report["serving_reports"][workload] = result
        for (label, _), run in zip(runs, result["runs"]):
            report["rows"].append(row(workload, label, run["summary"]))
    print_table(report["rows"])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
