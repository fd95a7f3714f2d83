"""Prefix cache: time to first token with a 2,000-token prefix cached vs not cached.

Each repetition draws a fresh random prefix, flushes the cache, and times one request of
prefix + suffix A (cold: the whole prompt is prefilled), then one request of prefix + suffix B
(warm: the radix tree holds the prefix, only the suffix is computed).  Both ask for one token
(max_new_tokens=1), so the wall time of generate() is the time to first token, IPC included.
Reports medians and their ratio; writes JSON (--out).

--restart adds the disk tier (--kv-disk-dir, a fresh temporary folder): the same engine writes every
prefix through to disk, is shut down once its writes are done, and a new engine on the same folder
times prefix + suffix C, served from disk after the restart.  It also checks that the restarted
engine's greedy tokens equal the first engine's.

--host-tier SIZE adds the host tier (--kv-host-size, CUDA; a CPU server refuses it): a new engine times
prefix + suffix, then as many other prefixes as fill its KV pool, which evict the first to host memory,
then prefix + another suffix, served from the host tier (cached_tokens_details.host).

    python bench/prefix_cache.py [--dtype float32] [--reps 5] [--restart] [--out prefix_cache.json]
"""

import argparse
import os
import statistics
import tempfile
import time

from _common import MODEL, machine_info, phase, print_table, random_prompts, write_json

TARGET = 10.0  # cold TTFT / warm TTFT (issue 2)


def ttft(engine, ids, out_tokens=None):
    start = time.perf_counter()
    out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0})
    if out_tokens is not None:
        out_tokens.append(out["output_ids"])
    return time.perf_counter() - start, out["meta_info"]


def wait_for_disk_writes(engine, timeout=300.0):
    deadline = time.monotonic() + timeout
    while engine.get_server_info().get("disk_pending_write_bytes", 0) and time.monotonic() < deadline:
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prefix-len", type=int, default=2000)
    ap.add_argument("--suffix-len", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunked-prefill-size", type=int, default=None, help="engine option (default: engine's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--restart", action="store_true", help="add the disk-tier case: TTFT after a restart")
    ap.add_argument("--kv-disk-block", type=int, default=64, help="disk tier block, tokens")
    ap.add_argument("--host-tier", default=None, metavar="SIZE",
                    help="add the host-tier case with --kv-host-size SIZE (CUDA)")
    ap.add_argument("--model", default=MODEL, help="model folder, .gguf or alias (default: %(default)s)")
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
    disk_dir = tempfile.mkdtemp(prefix="radixlm-kv-disk-") if args.restart else None
    if disk_dir:
        options.update(kv_disk_dir=disk_dir, kv_disk_block=args.kv_disk_block)
    cold, warm, cached, first_tokens = [], [], [], []
    with phase(f"radixlm {args.dtype}: start engine"):
        engine = Engine(model=args.model, **options)
    try:
        for rep in range(n):
            engine.flush_cache()
            t_cold, m_cold = ttft(engine, prefixes[rep] + suffixes[2 * rep])
            t_warm, m_warm = ttft(engine, prefixes[rep] + suffixes[2 * rep + 1], first_tokens)
            label = "warm-up" if rep == 0 else f"rep {rep}/{args.reps}"
            print(f"  {label}: cold {t_cold * 1e3:.0f} ms (cached {m_cold['cached_tokens']}), "
                  f"warm {t_warm * 1e3:.0f} ms (cached {m_warm['cached_tokens']})", flush=True)
            if rep:
                cold.append(t_cold)
                warm.append(t_warm)
                cached.append(m_warm["cached_tokens"])
        server = engine.get_server_info()
        if disk_dir:
            wait_for_disk_writes(engine)
    finally:
        engine.shutdown()
    restarted = restart_case(args, options, prefixes, suffixes, first_tokens) if disk_dir else None
    hosted = host_case(args, options, prefixes, suffixes) if args.host_tier else None

    rows = [{"case": "not cached", "ttft_ms": 1e3 * statistics.median(cold), "min_ms": 1e3 * min(cold),
             "max_ms": 1e3 * max(cold)},
            {"case": f"{args.prefix_len}-token prefix cached", "ttft_ms": 1e3 * statistics.median(warm),
             "min_ms": 1e3 * min(warm), "max_ms": 1e3 * max(warm)}]
    if restarted:
        rows.append({"case": f"{args.prefix_len}-token prefix from disk after a restart", **restarted["row"]})
    if hosted:
        rows.append({"case": f"{args.prefix_len}-token prefix from host memory after eviction", **hosted["row"]})
    ratio = statistics.median(cold) / statistics.median(warm)
    print()
    print_table(rows, [("case", "case", "{}"), ("ttft_ms", "median TTFT ms", "{:.1f}"),
                       ("min_ms", "min ms", "{:.1f}"), ("max_ms", "max ms", "{:.1f}")])
    print(f"speed-up {ratio:.1f}x (target >= {TARGET:.0f}x: {'met' if ratio >= TARGET else 'MISSED'}); "
          f"warm requests found {min(cached)}..{max(cached)} cached tokens")
    if restarted:
        disk_ratio = statistics.median(cold) / statistics.median(restarted["ttft_s"])
        restarted["ratio"] = disk_ratio
        print(f"after a restart, from disk: {disk_ratio:.1f}x faster than cold (target >= {TARGET:.0f}x: "
              f"{'met' if disk_ratio >= TARGET else 'MISSED'}); disk tokens per request "
              f"{min(restarted['disk_tokens'])}..{max(restarted['disk_tokens'])}; greedy tokens "
              f"{'equal' if restarted['same_tokens'] else 'DIFFER'} to the first engine's")
        d, n = restarted["disk_stats"], max(1, restarted["disk_stats"].get("disk_load_requests", 0))
        print(f"  per load: reading + checking {1e3 * d.get('disk_load_seconds', 0) / n:.1f} ms (loader threads), "
              f"installing {1e3 * d.get('disk_install_seconds', 0) / n:.1f} ms (scheduler thread), "
              f"{d.get('disk_read_bytes', 0) / n / 2**20:.1f} MiB read")
    if hosted:
        hosted["ratio"] = statistics.median(cold) / statistics.median(hosted["ttft_s"])
        print(f"from the host tier after eviction: {hosted['ratio']:.1f}x faster than cold; host tokens per "
              f"request {min(hosted['host_tokens'])}..{max(hosted['host_tokens'])}")
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, {"bench": "prefix_cache", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "config": vars(args), "machine": machine, "rows": rows, "ratio": ratio,
                          "target": TARGET, "meets_target": ratio >= TARGET,
                          "cold_s": cold, "warm_s": warm, "warm_cached_tokens": cached,
                          "chunked_prefill_size": server["chunked_prefill_size"], "restart": restarted, "host_tier": hosted})


def restart_case(args, options, prefixes, suffixes, first_tokens):
    """A new engine on the first one's disk folder: TTFT of each prefix with a third suffix."""
    from radixlm import Engine

    times, disk_tokens, same = [], [], True
    with phase(f"radixlm {args.dtype}: restart on {options['kv_disk_dir']}"):
        engine = Engine(model=args.model, **options)
    try:
        ttft(engine, random_prompts(1, 64, 64, 49152, args.seed + 7)[0])   # first forward's one-time costs
        for rep in range(1, len(prefixes)):
            tokens = []
            t, meta = ttft(engine, prefixes[rep] + suffixes[2 * rep + 1], tokens)
            same &= tokens[0] == first_tokens[rep]     # the warm request's prompt again: same token expected
            times.append(t)
            disk_tokens.append(meta["cached_tokens_details"]["disk"])
            print(f"  restarted rep {rep}: {t * 1e3:.0f} ms (disk {disk_tokens[-1]}, cached {meta['cached_tokens']})",
                  flush=True)
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    row = {"ttft_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times)}
    return {"row": row, "ttft_s": times, "disk_tokens": disk_tokens, "same_tokens": bool(same),
            "disk_stats": {k: v for k, v in info.items() if k.startswith("disk_")}}


def host_case(args, options, prefixes, suffixes):
    """A new engine with the host tier: each prefix is computed, evicted to host memory by fillers that
    take the whole pool, then asked again with another suffix."""
    from radixlm import Engine

    options = {k: v for k, v in options.items() if k not in ("kv_disk_dir", "kv_disk_block")}
    fillers = random_prompts(4, args.prefix_len + args.suffix_len, args.prefix_len + args.suffix_len, 49152,
                             args.seed + 9)
    times, host_tokens = [], []
    with phase(f"radixlm {args.dtype}: host tier of {args.host_tier}"):
        engine = Engine(model=args.model, kv_host_size=args.host_tier, **options)
    try:
        ttft(engine, random_prompts(1, 64, 64, 49152, args.seed + 7)[0])   # first forward's one-time costs
        for rep in range(1, len(prefixes)):
            engine.flush_cache()
            ttft(engine, prefixes[rep] + suffixes[2 * rep])
            for filler in fillers:                          # fill the pool: the prefix goes to host memory
                ttft(engine, filler)
            t, meta = ttft(engine, prefixes[rep] + suffixes[2 * rep + 1])
            times.append(t)
            host_tokens.append(meta["cached_tokens_details"]["host"])
            print(f"  host rep {rep}: {t * 1e3:.0f} ms (host {host_tokens[-1]}, cached {meta['cached_tokens']})",
                  flush=True)
    finally:
        engine.shutdown()
    row = {"ttft_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times)}
    return {"row": row, "ttft_s": times, "host_tokens": host_tokens}


if __name__ == "__main__":
    main()
