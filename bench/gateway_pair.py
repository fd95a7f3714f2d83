"""N radixlm servers behind the SGLang model gateway (`smg launch`) on one port, in the foreground until
SIGTERM/SIGINT, which stops the gateway and every worker.  bench/scale_out.py's run (c) launches it
through bench/serving.py's --launch:

    .venv/bin/python bench/gateway_pair.py --port 31000 --policy cache_aware \\
        --server-args "--model smollm2-135m-instruct --dtype bfloat16 --num-threads 1"

The gateway is started once every worker answers /health.  Its /health answers 200 before it has
registered a worker, but its /v1/models answers 503 until then, which is what serving.py's readiness
check waits for.
"""

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_launch import LaunchedServer, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 900.0


def gateway_command(name: str) -> str:
    """.venv/tools/<name>/bin/smg (what `make tools` installs), else `smg` on PATH."""
    for cand in (ROOT / ".venv" / "tools" / name / "bin" / "smg", shutil.which("smg")):
        if cand and Path(cand).exists():
            return str(cand)
    raise SystemExit(f"no smg found in .venv/tools/{name}/bin nor on PATH: run `make tools`")


def wait_workers_listed(url: str, want: set, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the gateway exited with {proc.returncode} before it listed its workers")
        try:
            listed = requests.get(url + "/workers", timeout=5).json().get("workers", [])
            if {w["url"] for w in listed if w.get("is_healthy")} >= want:
                return
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.25)
    raise SystemExit(f"the gateway did not list {sorted(want)} as healthy within 120 s")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/gateway_pair.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True, help="the port clients reach the gateway on")
    p.add_argument("--policy", default="cache_aware", help="smg --policy: cache_aware, round_robin, ... "
                   "(default: cache_aware)")
    p.add_argument("--workers", type=int, default=2, help="radixlm servers behind the gateway (default: 2)")
    p.add_argument("--server-args", required=True, help="`radixlm serve` options of every worker")
    p.add_argument("--gateway", default="smg", help="which `make tools` venv: smg or sglang-router (default: smg)")
    p.add_argument("--log-dir", default=None, help="worker and gateway logs (default: a temp folder)")
    args = p.parse_args(argv)
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="radixlm-gateway-"))
    command = gateway_command(args.gateway)
    workers, gateway = [], None
    signal.signal(signal.SIGTERM, _interrupt)   # unwinds like Ctrl-C, so the finally below stops everything
    try:
        workers = [LaunchedServer(args.server_args, log_dir, i) for i in range(args.workers)]
        for w in workers:
            w.wait_ready(READY_TIMEOUT_S, {})
        cmd = [command, "launch", "--host", "127.0.0.1", "--port", str(args.port), "--policy", args.policy,
               "--worker-urls", *[w.url for w in workers], "--prometheus-port", str(free_port()),
               "--health-check-interval-secs", "1", "--worker-startup-check-interval", "1", "--disable-retries"]
        if args.gateway == "smg":
            cmd += ["--load-monitor-interval", "1", "--worker-warmup-secs", "0"]
        log = open(log_dir / f"gateway-{args.port}.log", "wb")
        gateway = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_workers_listed(f"http://127.0.0.1:{args.port}", {w.url for w in workers}, gateway)
        print(f"{args.gateway} --policy {args.policy} on port {args.port} in front of "
              f"{', '.join(w.url for w in workers)}", flush=True)
        return gateway.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if gateway is not None and gateway.poll() is None:
            gateway.terminate()
            try:
                gateway.wait(15)
            except subprocess.TimeoutExpired:
                gateway.kill()
        for w in workers:
            w.stop()


if __name__ == "__main__":
    sys.exit(main())
