"""The per-step Python costs of issue 18 item 3, each beside the code it replaced (kept here only
to be measured): logprob targets of a 1,024-token chunk of an 8k prompt, ordering 256 waiting
2k-token requests (lpm), the grammar mask at B=64, V=49152, CPU extend attention, and parsing a
request's sampling parameters. Medians of --reps runs, in ms.

    .venv/bin/python bench/step_overheads.py --reps 7 --out bench/results/step_overheads.json
"""

import argparse
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_info, print_table, write_json  # noqa: E402

from radixlm.kernels import cpu_extend, torch_ref  # noqa: E402
from radixlm.runtime.runner.sampler import apply_grammar_bitmask  # noqa: E402
from radixlm.runtime.sampling_params import SamplingParams  # noqa: E402
from radixlm.runtime.scheduler.kv_manager import KVManager  # noqa: E402
from radixlm.runtime.scheduler.policy import SchedulePolicy  # noqa: E402
from radixlm.runtime.scheduler.req import Req  # noqa: E402


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def old_unpack_mask(logits, bitmask, rows, V):
    bits = torch.arange(32, dtype=torch.int32)
    allowed = ((bitmask[rows].unsqueeze(-1) >> bits) & 1).bool().view(len(rows), -1)[:, :V]
    mask = torch.ones((logits.shape[0], V), dtype=torch.bool)
    mask[rows] = allowed
    return logits.masked_fill(~mask, float("-inf"))


def cases(reps):
    rng, out = random.Random(0), []
    req = Req("a", [rng.randrange(49152) for _ in range(8192)], SamplingParams())
    pos = list(range(1024, 2048))
    prompt, output = req.origin_input_ids[:], []
    out.append(("logprob targets, 1,024-token chunk of 8k", median_ms(lambda: [(prompt + output)[q + 1] for q in pos], reps),
                median_ms(lambda: [req.fill_ids[q + 1] for q in pos], reps)))
    kv = KVManager(600_000, 300)
    shared = [rng.randrange(49152) for _ in range(1536)]
    base = Req("x", shared + [1] * 512, SamplingParams())
    kv.admit(base, 0, kv.tree.match_prefix([]))
    kv.alloc(base, 2048)
    kv.release(base)
    waiting = [Req(str(i), shared + [rng.randrange(49152) for _ in range(512)], SamplingParams()) for i in range(256)]
    policy = SchedulePolicy("lpm", kv.tree)
    out.append(("lpm order + admission match, 256 x 2k waiting", None,
                median_ms(lambda: (policy.order(waiting, 0), [kv.match(r) for r in waiting]), reps)))
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 49152, generator=g)
    bitmask = torch.randint(-2**31, 2**31 - 1, (64, 1536), generator=g, dtype=torch.int64).to(torch.int32)
    rows = list(range(64))
    out.append(("grammar mask B=64 V=49152", median_ms(lambda: old_unpack_mask(logits, bitmask, rows, 49152), reps),
                median_ms(lambda: apply_grammar_bitmask(logits, bitmask, rows, 49152), reps)))
    for B, P, E in [(16, 1024, 32), (64, 256, 4), (1, 0, 512)]:
        k, v = torch.randn(70_000, 3, 64, generator=g), torch.randn(70_000, 3, 64, generator=g)
        table = torch.randperm(70_000, generator=g)[:B * (P + E)].view(B, P + E).to(torch.int32).contiguous()
        args = (torch.randn(B * E, 9, 64, generator=g), k, v, table, torch.arange(B), torch.full((B,), P),
                torch.full((B,), E), 0.125)
        out.append((f"extend attention 1 layer, {B} req x {E} new on {P} cached (9/3 heads, D=64)",
                    median_ms(lambda: torch_ref.extend_attention(*args), reps),
                    median_ms(lambda: cpu_extend.extend_attention(*args), reps)))
    d = {"max_new_tokens": 64, "temperature": 0.7, "top_p": 0.9, "stop": ["\n\n"]}
    sent = SamplingParams.from_dict(d).to_dict()

    def three():
        SamplingParams.from_dict(d)
        for _ in range(2):
            SamplingParams.from_dict(d).verify(49152)

    def once():
        p = SamplingParams.from_dict(d)
        p.verify(49152)
        SamplingParams.received(sent, 49152)

    out.append(("sampling params per request (x100)", median_ms(lambda: [three() for _ in range(100)], reps),
                median_ms(lambda: [once() for _ in range(100)], reps)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    machine = machine_info()
    rows = [{"what": w, "before_ms": b, "after_ms": a} for w, b, a in cases(args.reps)]
    print(f"{machine.get('cpu')}, load {machine.get('loadavg_1_5_15')}")
    print_table(rows, [("what", "what", "{}"), ("before_ms", "before ms", "{:.2f}"), ("after_ms", "after ms", "{:.2f}")])
    write_json(args.out, {"machine": machine, "args": vars(args), "results": rows})


if __name__ == "__main__":
    main()
