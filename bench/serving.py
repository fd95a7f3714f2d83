"""Load generator for an LLM server speaking the SGLang-native or the OpenAI API (radixlm, SGLang,
vLLM, llama.cpp's llama-server, ...): streams every request and measures it client-side.

    # against a running server
    python bench/serving.py --backend radixlm-native --base-url http://127.0.0.1:30000 \\
        --workload shared-prefix --num-requests 64 --concurrency 16 --goodput ttft:2000,itl:100
    python bench/serving.py --backend openai-chat --base-url http://127.0.0.1:8080 --model my-model \\
        --workload multi-turn --request-rate 2
    # start radixlm itself (on a free port), once per configuration, and compare
    python bench/serving.py --workload shared-prefix --compare-radix --concurrency 16 \\
        --server-args "--model smollm2-135m-instruct --dtype bfloat16"
    python bench/serving.py --workload long-prompt-stall --chunk-sizes 256,1024
    python bench/serving.py --launch "--model smollm2-135m-instruct" --launch "--model ... --schedule-policy fcfs"

Workloads (bench/serving_workloads.py): random, shared-prefix (one long system prompt, many short
questions), multi-turn (conversations resending their history), json (json_schema constrained
requests; reports the share of outputs that parse and hold the required keys), long-prompt-stall
(one stream decoding while a few prompts of thousands of tokens arrive; reports the largest
inter-token gap of the running stream).

Arrivals: --concurrency N keeps N sessions in flight (a session is a request, or a whole conversation
for multi-turn); --request-rate R starts sessions by a Poisson process of R per second (capped by
--concurrency when both are given).

Reports time to first token (TTFT), inter-token latency (ITL, every gap between streamed tokens,
pooled), time per output token (TPOT, per request: (e2e - ttft) / (tokens - 1)), per-request output
speed (1 / TPOT), end-to-end latency, p50/p90/p99 each; throughput (requests/s, output and total
tokens/s); goodput (requests/s meeting every limit of --goodput, e.g. ttft:500,itl:50,e2e:20000 in
ms, where itl is judged on the request's mean ITL, i.e. its TPOT); prompt cache hit rate as the delta
of the server's /metrics counters over the run (radixlm_cached_tokens_total /
radixlm_prompt_tokens_total, or vLLM's prefix_cache_hits/queries) and from the cached_tokens the
responses report (meta_info.cached_tokens, usage.prompt_tokens_details.cached_tokens, llama.cpp
timings.cache_n).  Prints a table; --out writes JSON (summary per run, per-request records).
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving_workloads as wl  # noqa: E402
from serving_client import Client, Result  # noqa: E402
from serving_launch import LaunchedServer, launch_specs  # noqa: E402
from serving_report import parse_goodput, parse_prometheus, print_comparison, print_run, summarize  # noqa: E402
from serving_runners import build_workload, run_sessions, run_stall, warmup_sessions  # noqa: E402

BACKENDS = ("radixlm-native", "openai-chat", "openai-completions")
DEFAULT_SERVER_ARGS = "--model smollm2-135m-instruct"


# ---------------------------------------------------------------- server queries

async def _get(http, url: str, headers: dict, timeout: float = 10.0):
    try:
        async with http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                return None
            return await r.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


async def server_facts(http, base_url: str, headers: dict) -> dict:
    """What the server says about itself: model list, radixlm/SGLang model and server info."""
    facts = {}
    text = await _get(http, base_url + "/v1/models", headers)
    if text:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            facts["models"] = [m["id"] for m in json.loads(text)["data"]]
    text = await _get(http, base_url + "/get_model_info", headers)
    if text:
        with contextlib.suppress(ValueError):
            facts["model_info"] = json.loads(text)
    text = await _get(http, base_url + "/get_server_info", headers)
    if text:
        with contextlib.suppress(ValueError):
            info = json.loads(text)
            keep = ("model", "dtype", "disable_radix_cache", "chunked_prefill_size", "max_prefill_tokens",
                    "schedule_policy", "max_running_requests", "max_total_num_tokens", "page_size",
                    "attention_backend", "version", "context_length")
            facts["server_info"] = {k: info[k] for k in keep if k in info}
    return facts


def load_tokenizer(args, facts: dict):
    """The tokenizer named by --tokenizer, else the local one a radixlm/SGLang server reports, else None."""
    path = args.tokenizer
    if path is None:
        mi = facts.get("model_info") or {}
        cand = mi.get("tokenizer_path") or mi.get("model_path")
        if cand and os.path.isdir(cand):
            path = cand
    if not path:
        return None
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:   # an optional nicety: fall back to estimated lengths
        print(f"warning: tokenizer {path!r} not loaded ({exc}); prompt lengths are estimates", file=sys.stderr)
        return None


# ---------------------------------------------------------------- one run

async def bench_one(args, base_url: str, label: str, state: dict) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = aiohttp.ClientTimeout(total=args.request_timeout, sock_connect=30)
    # no keep-alive: a server may close an idle pooled connection just as it is reused
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, trust_env=False) as http:
        facts = await server_facts(http, base_url, headers)
        model = args.model or (facts.get("models") or [None])[0]
        if args.backend != "radixlm-native" and model is None:
            raise SystemExit("give --model: the server lists no models at /v1/models")
        if "work" not in state:   # built once, so every run of a comparison sends the same requests
            counter = wl.TokenCounter(load_tokenizer(args, facts))
            state["counter"] = counter
            state["work"] = build_workload(args, counter)
        counter = state["counter"]
        client = Client(args, base_url, model, counter)
        for ws in warmup_sessions(args, counter):
            r = Result(sid=ws.sid, turn=0)
            await client.send(http, ws, ws.turns[0], r, time.perf_counter())
            if not r.ok:
                print(f"warning: warm-up request failed: {r.error}", file=sys.stderr)
        work = state["work"]
        total = (1 + len(work["longs"])) if "victim" in work else sum(len(s.turns) for s in work["sessions"])
        pbar = None
        if not args.disable_tqdm:
            from tqdm import tqdm
            pbar = tqdm(total=total, desc=label, unit="req", file=sys.stderr)
        before = parse_prometheus(await _get(http, base_url + "/metrics", headers))
        stall = None
        try:
            if "victim" in work:
                results, duration, stall = await run_stall(client, http, work, args, pbar)
            else:
                results, duration = await run_sessions(client, http, work["sessions"], args, pbar)
        finally:
            if pbar is not None:
                pbar.close()
        await asyncio.sleep(0.5)   # let the server count the last finishes
        after_text = await _get(http, base_url + "/metrics", headers)
        after = parse_prometheus(after_text) if after_text else None
    summary = summarize(results, duration, parse_goodput(args.goodput), before, after, args.workload)
    return {"label": label, "base_url": base_url, "backend": args.backend, "model": model,
            "server": facts, "summary": summary, "stall": stall,
            "tokenizer": "exact" if state["counter"].exact else "estimated",
            "requests": [r.to_json(args.keep_text) for r in results]}


def machine_info() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "cores": os.cpu_count()}
    with contextlib.suppress(OSError):
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    return info


# ---------------------------------------------------------------- CLI

class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows a default unless it is None/False or the help already speaks of it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" not in text and not (action.default is None or action.default is False
                                          or action.default == argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/serving.py", description=__doc__, formatter_class=_HelpFormatter)
    g = p.add_argument_group("server")
    g.add_argument("--backend", choices=BACKENDS, default="radixlm-native",
                   help="API shape: SGLang-native /generate, or OpenAI chat / completions")
    g.add_argument("--base-url", default="http://127.0.0.1:30000", help="server to drive (unless launching)")
    g.add_argument("--model", default=None, help="model name for OpenAI servers (default: the first of /v1/models)")
    g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="sent as Authorization: Bearer")
    g.add_argument("--tokenizer", default=None,
                   help="HF tokenizer (folder or name) for exact prompt lengths (default: the local one a "
                        "radixlm server reports at /get_model_info; else lengths are estimated)")
    g.add_argument("--launch", action="append", metavar="ARGS",
                   help="start a server per occurrence on a free port, bench it, stop it: `radixlm serve` "
                        "options (starting with '-'), or a whole command containing {port}")
    g.add_argument("--compare-radix", action="store_true",
                   help="start radixlm with --server-args twice, radix cache on then off, and compare")
    g.add_argument("--chunk-sizes", default=None, metavar="N,N,...",
                   help="start radixlm with --server-args once per --chunked-prefill-size and compare")
    g.add_argument("--server-args", default=DEFAULT_SERVER_ARGS, help="radixlm serve options for "
                   "--compare-radix and --chunk-sizes")
    g.add_argument("--launch-timeout", type=float, default=900.0, help="seconds for a launched server to be ready")
    g.add_argument("--server-log-dir", default=None, help="where launched servers log (default: a temp folder)")

    g = p.add_argument_group("load")
    g.add_argument("--workload", choices=wl.WORKLOADS, default="random", help="what to send")
    g.add_argument("--num-requests", type=int, default=64, help="requests (multi-turn: turns in all)")
    g.add_argument("--concurrency", type=int, default=None,
                   help="sessions in flight at once (default 16 without --request-rate, else unbounded)")
    g.add_argument("--request-rate", type=float, default=None,
                   help="Poisson arrivals of sessions per second (default: all at once, --concurrency bounds)")
    g.add_argument("--input-len", type=int, default=256, help="random: prompt tokens; multi-turn: tokens per user turn")
    g.add_argument("--output-len", type=int, default=None,
                   help="max output tokens (default: 32, json 128)")
    g.add_argument("--range-ratio", type=float, default=1.0,
                   help="random: lengths drawn uniformly from [ratio * len, len]")
    g.add_argument("--system-prompt-len", type=int, default=None,
                   help="shared-prefix: system prompt tokens (default 1500); multi-turn: optional system prompt")
    g.add_argument("--question-len", type=int, default=24, help="shared-prefix: tokens per question")
    g.add_argument("--num-prefixes", type=int, default=1, help="shared-prefix: distinct system prompts")
    g.add_argument("--turns", type=int, default=4, help="multi-turn: turns per conversation")
    g.add_argument("--stall-prompts", type=int, default=3, help="long-prompt-stall: long prompts")
    g.add_argument("--stall-prompt-len", type=int, default=4000, help="long-prompt-stall: tokens per long prompt")
    g.add_argument("--stall-interval", type=float, default=0.5, help="long-prompt-stall: seconds between them")
    g.add_argument("--stall-output-len", type=int, default=2048,
                   help="long-prompt-stall: max tokens of the decoding stream (it is closed once done)")
    g.add_argument("--stall-warm-tokens", type=int, default=16,
                   help="long-prompt-stall: stream tokens before the long prompts are sent")
    g.add_argument("--stall-tail-tokens", type=int, default=8,
                   help="long-prompt-stall: stream tokens after the long prompts are answered")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    g.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let requests stop at EOS (default: ignore_eos, so output lengths are fixed)")
    g.add_argument("--warmup-requests", type=int, default=1, help="short unmeasured requests first")
    g.add_argument("--request-timeout", type=float, default=3600.0, help="seconds per request")
    g.add_argument("--seed", type=int, default=1, help="seed of the workload and of the arrival times")

    g = p.add_argument_group("report")
    g.add_argument("--goodput", default=None, metavar="ttft:MS,itl:MS,e2e:MS",
                   help="latency limits in ms; goodput counts requests meeting all (itl: the request's mean)")
    g.add_argument("--out", default=None, help="write the JSON report here")
    g.add_argument("--keep-text", action="store_true", help="keep generated text in the JSON report")
    g.add_argument("--disable-tqdm", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.output_len is None:
        args.output_len = 128 if args.workload == "json" else 32
    args.system_prompt_len_set = args.system_prompt_len is not None
    if args.system_prompt_len is None:
        args.system_prompt_len = 1500
    if args.concurrency is None and args.request_rate is None:
        args.concurrency = 16
    if args.concurrency is not None and args.concurrency < 1:
        parser.error("--concurrency must be >= 1")
    if args.request_rate is not None and args.request_rate <= 0:
        parser.error("--request-rate must be > 0")
    if args.num_requests < 1:
        parser.error("--num-requests must be >= 1")
    try:
        parse_goodput(args.goodput)
    except ValueError as exc:
        parser.error(str(exc))

    specs = launch_specs(args)
    state = {}
    runs = []
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(shlex.quote(a) for a in sys.argv),
              "machine": machine_info(),
              "config": {k: v for k, v in vars(args).items() if k not in ("api_key",)}, "runs": runs}
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    # SIGTERM unwinds like Ctrl-C, so a launched server is stopped on the way out
    signal.signal(signal.SIGTERM, _interrupt)
    if not specs:
        runs.append(asyncio.run(bench_one(args, args.base_url, args.base_url, state)))
        print_run(runs[-1]["label"], runs[-1]["summary"], runs[-1]["stall"])
    else:
        log_dir = Path(args.server_log_dir or tempfile.mkdtemp(prefix="radixlm-bench-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        for i, (label, spec) in enumerate(specs):
            print(f"[{time.strftime('%H:%M:%S')}] starting {label}: {spec}", flush=True)
            server = LaunchedServer(spec, log_dir, i)
            code = None
            try:
                t = time.monotonic()
                server.wait_ready(args.launch_timeout, headers)
                print(f"[{time.strftime('%H:%M:%S')}] {label} ready on {server.url} in "
                      f"{time.monotonic() - t:.0f} s (log {server.log_path})", flush=True)
                run = asyncio.run(bench_one(args, server.url, label, state))
            finally:
                code = server.stop()
            run["launch"] = {"command": server.cmd, "log": str(server.log_path), "exit_code": code}
            runs.append(run)
            print_run(label, run["summary"], run["stall"])
            write_report(args.out, report, quiet=True)   # finished runs survive a later failure
    ratio = print_comparison(runs)
    if ratio:
        report["throughput_ratio_first_over_last"] = ratio
    write_report(args.out, report)
    return 0 if all(r["summary"]["completed"] for r in runs) else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def write_report(path: Optional[str], report: dict, quiet: bool = False) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)
    if not quiet:
        print(f"wrote {path}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'Ctrl-C'}); launched servers were stopped", file=sys.stderr)
        sys.exit(130)
