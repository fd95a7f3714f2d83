"""What a draft costs: the time of a decode step of B requests that each also verify k draft tokens,
over the plain decode step (k = 0), on the embedded SmolLM2, in-process (real Scheduler and
ModelRunner, prompts of --prompt-len random tokens). The ratio minus 1 is the number of draft tokens
a request must have accepted per pass, on average, for drafting to pay at that batch size: the
break-even behind --speculative-max-step-tokens.

    .venv/bin/python bench/spec_step_cost.py --batches 1,4,8,16,32 --drafts 0,1,2,4 --dtype float32
"""

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_info, print_table, write_json  # noqa: E402


def step_costs(runner, batch, drafts, steps, prompt_len, seed) -> dict:
    """k -> median seconds of runner.forward_step for B decodes carrying k (wrong) draft tokens each."""
    from radixlm.runtime import io_struct as io
    from radixlm.runtime.scheduler.config import SchedulerConfig
    from radixlm.runtime.scheduler.plan import StepEntry, StepPlan
    from radixlm.runtime.scheduler.scheduler import Scheduler
    from radixlm.runtime.scheduler.step_builder import StepBuilder

    class Box:
        def recv(self, block=False):
            return []

        def send(self, msg):
            pass

    sched = Scheduler(SchedulerConfig(max_running_requests=max(64, batch)), runner, None, Box(), Box())
    rng = random.Random(seed)
    for i in range(batch):
        ids = [rng.randrange(100, runner.vocab_size) for _ in range(prompt_len)]
        sched.handle_generate(io.TokenizedGenerateReq(f"r{i}", ids, {"max_new_tokens": 4096, "temperature": 0,
                                                                     "ignore_eos": True}))
    while any(not r.prefill_done for r in sched.running + sched.waiting):
        sched.step()
    reqs = list(sched.running)
    out = {}
    for k in drafts:
        times = []
        for _ in range(steps):
            entries = []
            for r in reqs:
                assert sched.kv.alloc(r, 1 + k)
                entries.append(StepEntry(r, r.computed_len - 1 - k, 1 + k, True, draft=[101 + j for j in range(k)]))
            started = time.perf_counter()
            runner.forward_step(StepBuilder(runner.vocab_size).build(StepPlan(entries)))
            times.append(time.perf_counter() - started)
            for r in reqs:
                sched.kv.trim(r, r.seq_len - 1)
        out[k] = statistics.median(times)
    for r in reqs:
        sched._finish(r, {"type": "abort"}, cache=False)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,4,8,16,32")
    ap.add_argument("--drafts", default="0,1,2,4")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from radixlm.runtime.models.loader import resolve_model_path
    from radixlm.runtime.runner.model_runner import ModelRunner

    runner = ModelRunner(str(resolve_model_path()), dtype=args.dtype, max_total_tokens=80_000, num_rows=80)
    drafts = [int(k) for k in args.drafts.split(",")]
    rows = []
    for batch in map(int, args.batches.split(",")):
        cost = step_costs(runner, batch, drafts, args.steps, args.prompt_len, seed=batch)
        for k in drafts:
            rows.append({"batch": batch, "draft": k, "tokens": batch * (1 + k), "ms": cost[k] * 1e3,
                         "ratio": cost[k] / cost[0], "break_even": cost[k] / cost[0] - 1})
        print(f"batch {batch}: " + ", ".join(f"k={k} {cost[k] * 1e3:.1f} ms" for k in drafts), flush=True)
    machine = machine_info()
    print(f"{machine.get('cpu')}, load {machine.get('loadavg_1_5_15')}, dtype {args.dtype}")
    print_table(rows, [("batch", "batch", "{}"), ("draft", "draft k", "{}"), ("tokens", "tokens", "{}"),
                       ("ms", "step ms", "{:.1f}"), ("ratio", "x plain", "{:.2f}"),
                       ("break_even", "accepted/pass to pay", "{:.2f}")])
    write_json(args.out, {"machine": machine, "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
