"""A server on a shared host (issue 18 item 4): --thread-policy fixed against adaptive, alone and with
competing busy processes beside it (the same priority unless --competitor-nice), in one run: single-stream
decode speed and throughput at --concurrency, through bench/serving.py.

    .venv/bin/python bench/shared_host.py --server-args "--model smollm2-135m-instruct --dtype bfloat16" \\
        --competitors 0,1 --out bench/results/shared_host.json

A server whose threads all spin in each parallel region stalls behind a thread the kernel has
descheduled for another process; adaptive runs fewer threads while other work holds cores.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving  # noqa: E402
from _common import machine_info  # noqa: E402

BUSY = "while True: pass"
POLICIES = ("fixed", "adaptive")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/shared_host.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-args", default=serving.DEFAULT_SERVER_ARGS, help="radixlm serve options of every run")
    p.add_argument("--competitors", default="0,1", help="busy processes beside the server, one case per "
                   "comma-separated count (default: 0,1)")
    p.add_argument("--competitor-nice", type=int, default=0, help="their nice value (default: 0, as the server)")
    p.add_argument("--concurrency", type=int, default=16, help="sessions of the throughput case (default: 16)")
    p.add_argument("--num-requests", type=int, default=32, help="requests of the throughput case (default: 32)")
    p.add_argument("--single-requests", type=int, default=4, help="requests of the single-stream case (default: 4)")
    p.add_argument("--input-len", type=int, default=256, help="prompt tokens (default: 256)")
    p.add_argument("--output-len", type=int, default=64, help="output tokens (default: 64)")
    p.add_argument("--out", default=None, help="write the JSON report here")
    return p


def start_competitors(n: int, nice: int) -> list:
    return [subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", BUSY]) for _ in range(n)]


def stop(procs: list) -> None:
    for p in procs:
        p.kill()
        p.wait()


def run_case(args, competitors: int, concurrency: int, num_requests: int, tmp: Path) -> list:
    out = tmp / f"c{competitors}-n{concurrency}.json"
    argv = ["--workload", "random", "--num-requests", str(num_requests), "--concurrency", str(concurrency),
            "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--disable-tqdm",
            "--out", str(out)]
    for policy in POLICIES:
        argv += ["--launch", f"{args.server_args} --thread-policy {policy}"]
    procs = start_competitors(competitors, args.competitor_nice)
    try:
        serving.main(argv)
    finally:
        stop(procs)
    runs = json.loads(out.read_text())["runs"]
    return [{"competitors": competitors, "concurrency": concurrency, "policy": policy,
             "output_throughput": run["summary"]["output_throughput"],
             "tpot_ms_p50": (run["summary"].get("tpot_ms") or {}).get("p50"),
             "ttft_ms_p50": (run["summary"].get("ttft_ms") or {}).get("p50")}
            for policy, run in zip(POLICIES, runs)]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="radixlm-shared-host-"))
    rows = []
    for n in (int(x) for x in args.competitors.split(",")):
        rows += run_case(args, n, 1, args.single_requests, tmp)
        rows += run_case(args, n, args.concurrency, args.num_requests, tmp)
    print(f"\n{'competitors':>11} {'concurrency':>11} {'policy':>9} {'out tok/s':>10} {'TPOT p50 ms':>12}")
    for r in rows:
        tpot = "-" if r["tpot_ms_p50"] is None else f"{r['tpot_ms_p50']:.1f}"
        print(f"{r['competitors']:>11} {r['concurrency']:>11} {r['policy']:>9} {r['output_throughput']:>10.1f} "
              f"{tpot:>12}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                              "command": " ".join(sys.argv), "machine": machine_info(),
                                              "config": vars(args), "rows": rows}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
