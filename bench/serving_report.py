"""Summaries of a bench/serving.py run: percentiles, goodput, cache hit rate from /metrics, the printed tables."""

from typing import Optional

import numpy as np

PERCENTILES = (50, 90, 99)
HIT_RATE_COUNTERS = [  # (cached tokens, prompt tokens) counter pairs, first found wins
    ("radixlm_cached_tokens_total", "radixlm_prompt_tokens_total"),
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
]


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


def to_ms(x):
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
