"""Prefix cache: time to first token with a 2,000-token prefix cached vs not cached.

Each repetition draws a fresh random prefix, flushes the cache, and times one request of
prefix + suffix A (cold: the whole prompt is prefilled), then one request of prefix + suffix B
(warm: the radix tree holds the prefix, only the suffix is computed).  Both ask for one token
(max_new_tokens=1), so the wall time of generate() is the time to first token, IPC included.
Reports medians and their ratio; writes JSON (--out).

    python bench/prefix_cache.py [--dtype float32] [--reps 5] [--out prefix_cache.json]
"""

import argparse
import os
import statistics
import time

from _common import MODEL, machine_info, phase, print_table, random_prompts, write_json

TARGET = 10.0  # cold TTFT / warm TTFT (issue 2)


def ttft(engine, ids):
    start = time.perf_counter()
    out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0})
    return time.perf_counter() - start, out["meta_info"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prefix-len", type=int, default=2000)
    ap.add_argument("--suffix-len", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunked-prefill-size", type=int, default=None, help="engine option (default: engine's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    from radixlm import Engine

    machine = machine_info()
    print(f"machine: {machine.get('cpu')}, {machine['cores']} cores, load {machine.get('loadavg_1_5_15')}")
    n = args.reps + 1  # the first repetition warms the engine up and is not counted
    prefixes = random_prompts(n, args.prefix_len, args.prefix_len, 49152, args.seed)
    suffixes = random_prompts(2 * n, args.suffix_len, args.suffix_len, 49152, args.seed + 1)
    options = {"dtype": args.dtype, "log_level": "warning", "max_total_tokens": 4 * (args.prefix_len + args.suffix_len)}
    if args.chunked_prefill_size is not None:
        options["chunked_prefill_size"] = args.chunked_prefill_size
    cold, warm, cached = [], [], []
    with phase(f"radixlm {args.dtype}: start engine"):
        engine = Engine(model=MODEL, **options)
    try:
        for rep in range(n):
            engine.flush_cache()
            t_cold, m_cold = ttft(engine, prefixes[rep] + suffixes[2 * rep])
            t_warm, m_warm = ttft(engine, prefixes[rep] + suffixes[2 * rep + 1])
            label = "warm-up" if rep == 0 else f"rep {rep}/{args.reps}"
            print(f"  {label}: cold {t_cold * 1e3:.0f} ms (cached {m_cold['cached_tokens']}), "
                  f"warm {t_warm * 1e3:.0f} ms (cached {m_warm['cached_tokens']})", flush=True)
            if rep:
                cold.append(t_cold)
                warm.append(t_warm)
                cached.append(m_warm["cached_tokens"])
        server = engine.get_server_info()
    finally:
        engine.shutdown()

    rows = [{"case": "not cached", "ttft_ms": 1e3 * statistics.median(cold), "min_ms": 1e3 * min(cold),
             "max_ms": 1e3 * max(cold)},
            {"case": f"{args.prefix_len}-token prefix cached", "ttft_ms": 1e3 * statistics.median(warm),
             "min_ms": 1e3 * min(warm), "max_ms": 1e3 * max(warm)}]
    ratio = statistics.median(cold) / statistics.median(warm)
    print()
    print_table(rows, [("case", "case", "{}"), ("ttft_ms", "median TTFT ms", "{:.1f}"),
                       ("min_ms", "min ms", "{:.1f}"), ("max_ms", "max ms", "{:.1f}")])
    print(f"speed-up {ratio:.1f}x (target >= {TARGET:.0f}x: {'met' if ratio >= TARGET else 'MISSED'}); "
          f"warm requests found {min(cached)}..{max(cached)} cached tokens")
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, {"bench": "prefix_cache", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "config": vars(args), "machine": machine, "rows": rows, "ratio": ratio,
                          "target": TARGET, "meets_target": ratio >= TARGET,
                          "cold_s": cold, "warm_s": warm, "warm_cached_tokens": cached,
                          "chunked_prefill_size": server["chunked_prefill_size"]})


if __name__ == "__main__":
    main()
