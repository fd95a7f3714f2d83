"""Agent conversations that outnumber the KV budget: hit rate and throughput with the disk tier and without.

N conversations, each with its own system prompt, take turns round-robin (groups of --concurrency at
a time): each turn appends --user-len new tokens to the conversation's history (its earlier prompts
and outputs) and generates --out-len tokens.  The KV budget holds about 1/--oversubscribe of all the
conversations' final histories, so a conversation's prefix is evicted before its next turn.  The
same workload runs on an engine without the disk tier, on one with it (a fresh temporary folder), and
on one whose KV budget holds everything (the memory cache the disk tier stands in for): the disk
tier's greedy outputs are compared with the last (cached KV, whether from memory or disk, is the KV
an earlier step computed; recomputing it in another batch shape rounds differently, so outputs
without any cache may differ in low-precision dtypes).  Writes JSON (--out).

    python bench/kv_disk_agents.py [--dtype float32] [--conversations 24] [--turns 4] [--out kv_disk_agents.json]
"""

import argparse
import os
import shutil
import tempfile
import time

from _common import MODEL, machine_info, phase, print_table, random_prompts, write_json


def run_case(args, disk_dir, budget=None):
    from radixlm import Engine

    systems = random_prompts(args.conversations, args.system_len, args.system_len, 49152, args.seed)
    users = random_prompts(args.conversations * args.turns, args.user_len, args.user_len, 49152, args.seed + 1)
    final = args.system_len + args.turns * (args.user_len + args.out_len)
    budget = budget or max(2 * final, args.conversations * final // args.oversubscribe)
    options = {"dtype": args.dtype, "log_level": "warning", "max_total_tokens": budget}
    if disk_dir:
        options.update(kv_disk_dir=disk_dir, kv_disk_block=args.kv_disk_block,
                       kv_disk_write_policy=args.kv_disk_write_policy)
    histories = [list(s) for s in systems]
    outputs, prompt_tokens, cached, disk = [], 0, 0, 0
    label = "with the disk tier" if disk_dir else "without the disk tier"
    with phase(f"radixlm {args.dtype} {label}: start engine (KV budget {budget} tokens)"):
        engine = Engine(model=MODEL, **options)
    try:
        started = time.perf_counter()
        for turn in range(args.turns):
            for g in range(0, args.conversations, args.concurrency):
                group = list(range(g, min(g + args.concurrency, args.conversations)))
                for c in group:
                    histories[c] += users[turn * args.conversations + c]
                outs = engine.generate(input_ids=[histories[c] for c in group], sampling_params={
                    "max_new_tokens": args.out_len, "temperature": 0, "ignore_eos": True})
                for c, out in zip(group, outs):
                    histories[c] += out["output_ids"]
                    outputs.append(out["output_ids"])
                    meta = out["meta_info"]
                    prompt_tokens += meta["prompt_tokens"]
                    cached += meta["cached_tokens"]
                    disk += meta.get("cached_tokens_details", {}).get("disk", 0)
            print(f"  turn {turn + 1}/{args.turns}: hit rate so far {cached / prompt_tokens:.1%}", flush=True)
        seconds = time.perf_counter() - started
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    generated = sum(len(o) for o in outputs)
    return {"case": label, "seconds": seconds, "hit_rate": cached / prompt_tokens, "disk_tokens": disk,
            "prompt_tokens": prompt_tokens, "output_tok_s": generated / seconds,
            "prompt_tok_s": prompt_tokens / seconds, "kv_budget": budget,
            "disk_stats": {k: v for k, v in info.items() if k.startswith("disk_")}}, outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-len", type=int, default=512, help="tokens of each conversation's own system prompt")
    ap.add_argument("--user-len", type=int, default=32)
    ap.add_argument("--out-len", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--oversubscribe", type=int, default=4, help="all histories / KV budget")
    ap.add_argument("--kv-disk-block", type=int, default=64)
    ap.add_argument("--kv-disk-write-policy", default="write_through", choices=("write_through", "write_back"),
                    help="write_back: blocks reach disk only when evicted after a reuse (compare disk_write_bytes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()

    machine = machine_info()
    print(f"machine: {machine.get('cpu')}, {machine['cores']} cores, load {machine.get('loadavg_1_5_15')}")
    off, out_off = run_case(args, None)
    disk_dir = tempfile.mkdtemp(prefix="radixlm-kv-disk-")
    try:
        on, out_on = run_case(args, disk_dir)
    finally:
        shutil.rmtree(disk_dir, ignore_errors=True)
    final = args.system_len + args.turns * (args.user_len + args.out_len)
    big, out_big = run_case(args, None, budget=2 * args.conversations * final)
    big["case"] = "all in memory (no eviction)"
    rows = [off, on, big]
    print()
    print_table(rows, [("case", "case", "{}"), ("hit_rate", "hit rate", "{:.1%}"), ("disk_tokens", "from disk", "{}"),
                       ("seconds", "wall s", "{:.1f}"), ("output_tok_s", "output tok/s", "{:.1f}"),
                       ("prompt_tok_s", "prompt tok/s", "{:.0f}")])
    same = out_big == out_on
    equal_turns = sum(a == b for a, b in zip(out_big, out_on))
    equal_uncached = sum(a == b for a, b in zip(out_off, out_on))
    speedup = off["seconds"] / on["seconds"]
    print(f"disk tier: {speedup:.2f}x the throughput, hit rate {off['hit_rate']:.1%} -> {on['hit_rate']:.1%} "
          f"(all in memory: {big['hit_rate']:.1%}); greedy outputs equal to the all-in-memory run's in "
          f"{equal_turns}/{len(out_on)} turns, to the uncached run's in {equal_uncached}/{len(out_on)}")
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, {"bench": "kv_disk_agents", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                          "config": vars(args), "machine": machine, "rows": rows, "speedup": speedup,
                          "same_outputs_as_memory": same, "equal_turns_memory": equal_turns,
                          "equal_turns_uncached": equal_uncached})


if __name__ == "__main__":
    main()
