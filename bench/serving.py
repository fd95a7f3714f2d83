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
import math
import os
import platform
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving_workloads as wl  # noqa: E402

BACKENDS = ("radixlm-native", "openai-chat", "openai-completions")
PERCENTILES = (50, 90, 99)
DEFAULT_SERVER_ARGS = "--model smollm2-135m-instruct"
HIT_RATE_COUNTERS = [  # (cached tokens, prompt tokens) counter pairs, first found wins
    ("radixlm_cached_tokens_total", "radixlm_prompt_tokens_total"),
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
]


# ---------------------------------------------------------------- per-request record

@dataclass
class Result:
    sid: int
    turn: int
    role: str = "main"
    ok: bool = False
    error: Optional[str] = None
    status: Optional[int] = None
    start: float = 0.0               # seconds since the run started
    ttft: Optional[float] = None     # seconds
    e2e: Optional[float] = None      # seconds
    prompt_tokens: Optional[int] = None
    output_tokens: int = 0
    cached_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    itls: list = field(default_factory=list)         # seconds, one per token after the first
    event_times: list = field(default_factory=list)  # seconds since the run started, events with tokens
    event_tokens: list = field(default_factory=list)  # output tokens so far at each of those events
    text: str = ""
    json_valid: Optional[bool] = None
    cancelled: bool = False          # closed by the benchmark on purpose (long-prompt-stall victim)

    @property
    def tpot(self) -> Optional[float]:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_json(self, keep_text: bool) -> dict:
        d = asdict(self)
        d["tpot"] = self.tpot
        d.pop("event_times")
        d.pop("event_tokens")
        if not keep_text:
            d.pop("text")
        d["max_gap"] = max(np.diff(self.event_times)) if len(self.event_times) > 1 else None
        d["itls"] = [round(x, 6) for x in self.itls]
        return d


# ---------------------------------------------------------------- backends

class Client:
    """Builds and streams one request of a session turn for the chosen API shape."""

    def __init__(self, args, base_url: str, model: Optional[str], counter):
        self.kind = args.backend
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.args = args
        self.counter = counter
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"

    def payload(self, session, turn, output_len: int) -> tuple:
        a = self.args
        if self.kind == "radixlm-native":
            sp = {"max_new_tokens": output_len, "temperature": a.temperature}
            if a.ignore_eos:
                sp["ignore_eos"] = True
            if turn.json_schema is not None:
                sp["json_schema"] = json.dumps(turn.json_schema)
            body = {"text": wl.render_text(session, turn), "sampling_params": sp, "stream": True}
            return "/generate", body
        body = {"model": self.model, "max_tokens": output_len, "temperature": a.temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        if a.ignore_eos:
            body["ignore_eos"] = True          # radixlm, SGLang, vLLM and llama.cpp read it
        if turn.json_schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": turn.schema_name or "output", "schema": turn.json_schema, "strict": True}}
        if self.kind == "openai-chat":
            body["messages"] = wl.render_messages(session, turn)
            return "/v1/chat/completions", body
        body["prompt"] = wl.render_text(session, turn)
        return "/v1/completions", body

    async def send(self, http, session, turn, res: Result, t0: float, on_event=None) -> None:
        """Streams one request into res (times relative to t0); on_event(res) after each token event."""
        path, body = self.payload(session, turn, turn.output_len)
        start = time.perf_counter()
        res.start = start - t0
        last = None
        prev_tokens = 0
        n_events = 0
        usage = None
        try:
            async with http.post(self.base_url + path, json=body, headers=self.headers) as resp:
                res.status = resp.status
                if resp.status != 200:
                    res.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    return
                buf = b""
                done = False
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n\n" in buf:
                        raw, buf = buf.split(b"\n\n", 1)
                        data = _sse_data(raw)
                        if data is None:
                            continue
                        if data == "[DONE]":
                            done = True
                            break
                        msg = json.loads(data)
                        if "error" in msg and msg["error"]:
                            err = msg["error"]
                            res.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                            return
                        now = time.perf_counter()
                        new = self._apply(msg, res)
                        if self.kind == "radixlm-native":
                            tokens = res.output_tokens
                            new = tokens - prev_tokens
                            prev_tokens = tokens
                        elif msg.get("usage"):
                            usage = msg["usage"]
                        if new > 0:
                            n_events += 1
                            if last is None:
                                res.ttft = now - start
                            else:
                                gap = (now - last) / new
                                res.itls.extend([gap] * new)
                            # the first event's extra tokens arrived with the first one: no gap
                            last = now
                            res.event_times.append(now - t0)
                            res.event_tokens.append((res.event_tokens[-1] if res.event_tokens else 0) + new)
                            if on_event is not None:
                                on_event(res)
                    if done:
                        break
                if not done:
                    res.error = "stream ended without [DONE]"
                    return
        except asyncio.CancelledError:
            res.cancelled = True
            res.e2e = time.perf_counter() - start
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            res.error = f"{type(exc).__name__}: {exc}"
            return
        res.e2e = time.perf_counter() - start
        if self.kind != "radixlm-native":
            self._finish_openai(res, usage, n_events)
        if res.ttft is None:
            res.error = res.error or "no output token"
            return
        if turn.json_schema is not None:
            res.json_valid = wl.json_valid(res.text, turn.json_schema)
        res.ok = True

    def _apply(self, msg: dict, res: Result) -> int:
        """Folds one event into res; returns the new tokens it carries (OpenAI: the tokens of the chunk's
        text with a tokenizer, else 1 per content chunk)."""
        if self.kind == "radixlm-native":
            meta = msg.get("meta_info") or {}
            res.text = msg.get("text", res.text)
            res.output_tokens = int(meta.get("completion_tokens", res.output_tokens) or 0)
            res.prompt_tokens = meta.get("prompt_tokens", res.prompt_tokens)
            res.cached_tokens = meta.get("cached_tokens", res.cached_tokens)
            fr = meta.get("finish_reason")
            if isinstance(fr, dict):
                res.finish_reason = fr.get("type")
            return 0   # counted by the caller from completion_tokens
        if msg.get("timings"):   # llama.cpp: prompt_n evaluated + cache_n reused
            t = msg["timings"]
            if "cache_n" in t:
                res.cached_tokens = int(t["cache_n"])
                res.prompt_tokens = int(t.get("prompt_n", 0)) + int(t["cache_n"])
        new = 0
        for choice in msg.get("choices") or []:
            if self.kind == "openai-chat":
                delta = choice.get("delta") or {}
                piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            else:
                piece = choice.get("text") or ""
            if piece:
                res.text += piece
                new += max(1, self.counter.count(piece)) if self.counter.exact else 1
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        return new

    def _finish_openai(self, res: Result, usage: Optional[dict], n_events: int) -> None:
        if usage:
            res.output_tokens = int(usage.get("completion_tokens") or 0)
            res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                res.cached_tokens = int(details["cached_tokens"])
        elif self.counter.exact and res.text:
            res.output_tokens = self.counter.count(res.text)
        else:
            res.output_tokens = n_events


def _sse_data(raw: bytes) -> Optional[str]:
    lines = [ln[5:].lstrip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.startswith("data:")]
    return "\n".join(lines) if lines else None


# ---------------------------------------------------------------- server queries

async def _get(http, url: str, headers: dict, timeout: float = 10.0):
    try:
        async with http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                return None
            return await r.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


def parse_prometheus(text: Optional[str]) -> dict:
    """Metric name -> value summed over label sets (comment lines skipped)."""
    out = {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            name_part, value = line.rsplit(None, 1)
            v = float(value)
        except ValueError:
            continue
        name = name_part.split("{", 1)[0].strip()
        out[name] = out.get(name, 0.0) + v
    return out


def metrics_hit_rate(before: dict, after: dict) -> Optional[dict]:
    for hit, total in HIT_RATE_COUNTERS:
        if hit in after and total in after:
            d_hit, d_total = after[hit] - before.get(hit, 0.0), after[total] - before.get(total, 0.0)
            return {"source": f"/metrics {hit} / {total}", "cached_tokens": d_hit, "prompt_tokens": d_total,
                    "hit_rate": d_hit / d_total if d_total > 0 else None}
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


# ---------------------------------------------------------------- workload

def build_workload(args, counter) -> dict:
    rng = random.Random(args.seed)
    n = args.num_requests
    w = args.workload
    if w == "random":
        return {"sessions": wl.build_random(counter, rng, n, args.input_len, args.output_len, args.range_ratio)}
    if w == "shared-prefix":
        return {"sessions": wl.build_shared_prefix(counter, rng, n, args.system_prompt_len, args.question_len,
                                                   args.output_len, args.num_prefixes)}
    if w == "multi-turn":
        return {"sessions": wl.build_multi_turn(counter, rng, n, args.turns, args.input_len, args.output_len,
                                                args.system_prompt_len if args.system_prompt_len_set else 0)}
    if w == "json":
        return {"sessions": wl.build_json(counter, rng, n, args.output_len)}
    victim, longs = wl.build_stall(counter, rng, args.stall_output_len, args.stall_prompts, args.stall_prompt_len)
    return {"victim": victim, "longs": longs}


def warmup_sessions(args, counter) -> list:
    rng = random.Random(args.seed + 7919)
    return [wl.Session(-1 - i, [wl.Turn(counter.text(rng, 24, lead=f"Warm-up {i}."), 4)], raw=True)
            for i in range(args.warmup_requests)]


# ---------------------------------------------------------------- runners

async def run_sessions(client, http, sessions, args, pbar) -> tuple:
    """Runs every session (its turns one after another); returns (results, duration_s)."""
    sem = asyncio.Semaphore(args.concurrency) if args.concurrency else None
    rng = random.Random(args.seed + 1)
    results = []
    t0 = time.perf_counter()

    async def one(session):
        if sem is not None:
            await sem.acquire()
        try:
            session.reset()
            for i, turn in enumerate(session.turns):
                res = wl_result(session, i)
                results.append(res)
                await client.send(http, session, turn, res, t0)
                if pbar is not None:
                    pbar.update(1)
                if not res.ok:
                    if pbar is not None and len(session.turns) > i + 1:
                        pbar.update(len(session.turns) - i - 1)
                    break
                session.history.append((turn.user, res.text))
        finally:
            if sem is not None:
                sem.release()

    tasks = []
    for session in sessions:
        if args.request_rate and math.isfinite(args.request_rate) and tasks:
            await asyncio.sleep(rng.expovariate(args.request_rate))
        tasks.append(asyncio.create_task(one(session)))
    await asyncio.gather(*tasks)
    return results, time.perf_counter() - t0


def wl_result(session, turn_index) -> Result:
    return Result(sid=session.sid, turn=turn_index, role=session.role)


async def run_stall(client, http, work, args, pbar) -> tuple:
    """One stream decodes; after it has --stall-warm-tokens tokens, --stall-prompts long prompts arrive
    --stall-interval s apart; once they are all answered and the stream has --stall-tail-tokens more
    tokens, the stream is closed (the server aborts it)."""
    victim, longs = work["victim"], work["longs"]
    t0 = time.perf_counter()
    vres = wl_result(victim, 0)
    warm, tail = asyncio.Event(), asyncio.Event()
    state = {"mark": None}

    def on_event(res):
        if res.output_tokens >= args.stall_warm_tokens:
            warm.set()
        if state["mark"] is not None and res.output_tokens >= state["mark"] + args.stall_tail_tokens:
            tail.set()

    vtask = asyncio.create_task(client.send(http, victim, victim.turns[0], vres, t0, on_event))
    waiter = asyncio.create_task(warm.wait())
    await asyncio.wait([vtask, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if vtask.done():
        raise RuntimeError(f"the decoding stream ended before {args.stall_warm_tokens} tokens: "
                           f"{vres.error or vres.finish_reason}")
    inject = time.perf_counter() - t0
    lres, ltasks = [], []
    for j, s in enumerate(longs):
        if j:
            await asyncio.sleep(args.stall_interval)
        r = wl_result(s, 0)
        lres.append(r)
        ltasks.append(asyncio.create_task(client.send(http, s, s.turns[0], r, t0)))
    for t in asyncio.as_completed(ltasks):
        await t
        if pbar is not None:
            pbar.update(1)
    longs_done = time.perf_counter() - t0
    state["mark"] = vres.output_tokens
    waiter = asyncio.create_task(tail.wait())
    await asyncio.wait([vtask, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    finished_early = vtask.done()
    if not finished_early:
        vtask.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await vtask
        vres.ok = vres.ttft is not None and vres.error is None
    if pbar is not None:
        pbar.update(1)
    duration = time.perf_counter() - t0

    times = np.array(vres.event_times)
    gaps = np.diff(times) if len(times) > 1 else np.array([])
    ends = times[1:] if len(times) > 1 else np.array([])
    starts = times[:-1] if len(times) > 1 else np.array([])
    window = gaps[(ends > inject) & (starts < longs_done)] if len(gaps) else gaps
    # baseline: mean time per token of the stream before the long prompts (events read in one network
    # read have ~0 gaps between them, so a median of event gaps would say little)
    pre = [i for i, t in enumerate(vres.event_times) if t <= inject]
    base = None
    if len(pre) > 1 and vres.event_tokens[pre[-1]] > vres.event_tokens[0]:
        base = (vres.event_times[pre[-1]] - vres.event_times[0]) / (vres.event_tokens[pre[-1]] - vres.event_tokens[0])
    stall = {
        "victim_tokens": vres.output_tokens, "victim_finished_before_long_prompts": bool(finished_early and
                                                                                    vres.event_times[-1] < longs_done),
        "inject_at_s": inject, "long_prompts_done_at_s": longs_done,
        "baseline_ms_per_token": _ms(base), "max_gap_ms": _ms(float(gaps.max()) if len(gaps) else None),
        "max_gap_during_long_prompts_ms": _ms(float(window.max()) if len(window) else None),
        "gaps_during_long_prompts": int(len(window)),
        "long_prompt_tokens": [r.prompt_tokens for r in lres],
        "long_prompt_ttft_ms": [_ms(r.ttft) for r in lres],
        "long_prompt_errors": [r.error for r in lres if r.error],
    }
    if base and stall["max_gap_during_long_prompts_ms"] is not None:
        stall["stall_factor"] = stall["max_gap_during_long_prompts_ms"] / 1000 / base
    if stall["victim_finished_before_long_prompts"]:
        print("warning: the decoding stream finished before the long prompts were answered; "
              "raise --stall-output-len", file=sys.stderr)
    return [vres] + lres, duration, stall


def _ms(x):
    return None if x is None else x * 1000.0


# ---------------------------------------------------------------- summary

def _pcts(values, scale=1000.0) -> Optional[dict]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    arr = np.asarray(vals, dtype=float) * scale
    out = {f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES}
    out["mean"] = float(arr.mean())
    out["max"] = float(arr.max())
    return out


def parse_goodput(spec: Optional[str]) -> dict:
    if not spec:
        return {}
    limits = {}
    for part in spec.split(","):
        key, _, val = part.partition(":")
        key = key.strip().lower()
        if key == "tpot":
            key = "itl"
        if key not in ("ttft", "itl", "e2e") or not val:
            raise ValueError(f"--goodput takes ttft:MS,itl:MS,e2e:MS, not {part!r}")
        limits[key] = float(val)
    return limits


def summarize(results, duration, limits: dict, metrics_before, metrics_after, workload: str) -> dict:
    main = [r for r in results if r.role != "long"] if workload == "long-prompt-stall" else results
    ok = [r for r in main if r.ok]
    failed = [r for r in main if not r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)
    s = {
        "completed": len(ok), "failed": len(failed), "duration_s": duration,
        "request_throughput": len(ok) / duration if duration else None,
        "output_throughput": out_tokens / duration if duration else None,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration else None,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "ttft_ms": _pcts([r.ttft for r in ok]),
        "itl_ms": _pcts([g for r in ok for g in r.itls]),
        "tpot_ms": _pcts([r.tpot for r in ok]),
        "e2e_ms": _pcts([r.e2e for r in ok]),
        "output_speed_tok_s": _pcts([1.0 / r.tpot for r in ok if r.tpot], scale=1.0),
        "errors": sorted({r.error for r in failed if r.error})[:10],
    }
    with_cached = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    if with_cached:
        c, p = sum(r.cached_tokens for r in with_cached), sum(r.prompt_tokens for r in with_cached)
        s["response_cache_hit_rate"] = c / p if p else None
        s["response_cached_tokens"] = c
    s["metrics_cache"] = metrics_hit_rate(metrics_before, metrics_after) if metrics_after else None
    if limits:
        good = 0
        for r in ok:
            tp = r.tpot
            if "ttft" in limits and r.ttft * 1000 > limits["ttft"]:
                continue
            if "itl" in limits and tp is not None and tp * 1000 > limits["itl"]:
                continue
            if "e2e" in limits and r.e2e * 1000 > limits["e2e"]:
                continue
            good += 1
        s["goodput"] = {"limits_ms": limits, "good_requests": good,
                        "goodput_req_s": good / duration if duration else None,
                        "good_fraction": good / len(main) if main else None}
    valid = [r.json_valid for r in ok if r.json_valid is not None]
    if valid:
        s["json_valid_fraction"] = sum(valid) / len(valid)
    return s


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _hit(s) -> str:
    m = s.get("metrics_cache") or {}
    parts = []
    if m.get("hit_rate") is not None:
        parts.append(f"{m['hit_rate'] * 100:.1f}%")
    if s.get("response_cache_hit_rate") is not None:
        parts.append(f"resp {s['response_cache_hit_rate'] * 100:.1f}%")
    return " / ".join(parts) or "-"


def print_run(label: str, s: dict, stall: Optional[dict]) -> None:
    print(f"\n== {label} ==")
    print(f"requests: {s['completed']} ok, {s['failed']} failed in {s['duration_s']:.1f} s")
    print(f"throughput: {_fmt(s['request_throughput'], '.3f')} req/s, {_fmt(s['output_throughput'])} output tok/s, "
          f"{_fmt(s['total_token_throughput'])} total tok/s ({s['total_input_tokens']} in, "
          f"{s['total_output_tokens']} out)")
    print(f"{'':22}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'max':>10}")
    for key, name in (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL (ms)"), ("tpot_ms", "TPOT (ms)"),
                      ("e2e_ms", "E2E latency (ms)"), ("output_speed_tok_s", "output speed (tok/s)")):
        p = s.get(key)
        if p:
            print(f"{name:22}" + "".join(f"{p[k]:>10.1f}" for k in ("p50", "p90", "p99", "mean", "max")))
    m = s.get("metrics_cache")
    if m and m.get("hit_rate") is not None:
        print(f"cache hit rate (/metrics delta): {m['hit_rate'] * 100:.1f}% "
              f"({m['cached_tokens']:.0f} of {m['prompt_tokens']:.0f} prompt tokens)")
    if s.get("response_cache_hit_rate") is not None:
        print(f"cache hit rate (responses' cached_tokens): {s['response_cache_hit_rate'] * 100:.1f}%")
    if s.get("goodput"):
        g = s["goodput"]
        lim = ", ".join(f"{k}<={v:g}ms" for k, v in g["limits_ms"].items())
        print(f"goodput ({lim}): {_fmt(g['goodput_req_s'], '.3f')} req/s "
              f"({g['good_requests']} requests, {g['good_fraction'] * 100:.0f}%)")
    if s.get("json_valid_fraction") is not None:
        print(f"valid JSON outputs: {s['json_valid_fraction'] * 100:.1f}%")
    if stall:
        print(f"decoding stream: {stall['victim_tokens']} tokens, before the long prompts "
              f"{_fmt(stall['baseline_ms_per_token'])} ms/token, largest gap {_fmt(stall['max_gap_ms'])} ms, largest "
              f"while the long prompts ran {_fmt(stall['max_gap_during_long_prompts_ms'])} ms; long prompts "
              f"{stall['long_prompt_tokens']} tokens, TTFT "
              f"{[round(x) if x is not None else None for x in stall['long_prompt_ttft_ms']]} ms")
    for e in s["errors"]:
        print(f"  error: {e}")


def print_comparison(runs: list) -> Optional[dict]:
    if len(runs) < 2:
        return None
    cols = [("run", 24), ("ok", 5), ("fail", 5), ("dur s", 8), ("req/s", 8), ("out tok/s", 10),
            ("TTFT p50", 10), ("TTFT p99", 10), ("ITL p50", 9), ("ITL p99", 9), ("tok/s p50", 10),
            ("max gap", 9), ("cache hit", 20)]
    print()
    print("".join(f"{name:>{w}}" if i else f"{name:<{w}}" for i, (name, w) in enumerate(cols)))
    for run in runs:
        s = run["summary"]
        stall = run.get("stall") or {}
        vals = [run["label"][:23], s["completed"], s["failed"], _fmt(s["duration_s"]),
                _fmt(s["request_throughput"], ".3f"), _fmt(s["output_throughput"]),
                _fmt((s["ttft_ms"] or {}).get("p50"), ".0f"), _fmt((s["ttft_ms"] or {}).get("p99"), ".0f"),
                _fmt((s["itl_ms"] or {}).get("p50"), ".0f"), _fmt((s["itl_ms"] or {}).get("p99"), ".0f"),
                _fmt((s["output_speed_tok_s"] or {}).get("p50")),
                _fmt(stall.get("max_gap_during_long_prompts_ms", stall.get("max_gap_ms")), ".0f"), _hit(s)]
        print("".join(f"{str(v):>{w}}" if i else f"{str(v):<{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))
    if runs[0].get("stall"):
        return None   # one stream: throughput ratios say nothing there
    first, last = runs[0]["summary"], runs[-1]["summary"]
    ratio = {}
    for key in ("request_throughput", "output_throughput"):
        if first.get(key) and last.get(key):
            ratio[key] = first[key] / last[key]
    if ratio:
        print(f"throughput ratio ({runs[0]['label']} / {runs[-1]['label']}): "
              f"{_fmt(ratio.get('request_throughput'), '.2f')}x requests/s, "
              f"{_fmt(ratio.get('output_throughput'), '.2f')}x output tok/s")
    return ratio


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
        import urllib.request
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            for path in ("/health", "/v1/models"):
                try:
                    req = urllib.request.Request(self.url + path, headers=headers)
                    with urllib.request.urlopen(req, timeout=2) as r:
                        if r.status == 200:
                            return
                except Exception:
                    pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"server not ready in {timeout:.0f} s:\n{self.log_tail()}")

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
