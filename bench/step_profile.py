"""Where a decode step's time goes at batch 1, 8 and 64: model forward (attention apart), sampling,
scheduler (policy, planning, batch building, request updates) and IPC (encoding the step's
BatchTokenOut and a ZMQ ipc:// push/pull of it, as the scheduler process does).

The real Scheduler and ModelRunner run in-process on the embedded SmolLM2 model; each phase is
timed by wrapping the component that does it. Reported per step: the median over the measured
steps of each run, then the median over --runs runs.

    .venv/bin/python bench/step_profile.py --batches 1,8,64 --dtype float32 --runs 3 --out bench/results/step_profile.json
    .venv/bin/python bench/step_profile.py --batches 16 --dtype bfloat16 --shared-prefix 1507 --prompt-len 26
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_info, print_table, write_json  # noqa: E402


class Timer:
    """Wraps obj.name so that each call's wall time adds to self.total."""

    def __init__(self, obj, name):
        self.total, inner = 0.0, getattr(obj, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - started

        setattr(obj, name, timed)


def _zmq_pair():
    import zmq

    ctx = zmq.Context.instance()
    folder = tempfile.mkdtemp()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(f"ipc://{folder}/p")
    push.connect(f"ipc://{folder}/p")
    return push, pull


def profile(runner, batch, steps, prompt_len, seed, shared_len=0):
    from radixlm.runtime import io_struct as io
    from radixlm.runtime.scheduler.config import SchedulerConfig
    from radixlm.runtime.scheduler.scheduler import Scheduler

    class Outbox:
        def __init__(self):
            self.push, self.pull = _zmq_pair()
            self.seconds = 0.0

        def send(self, msg):
            started = time.perf_counter()
            self.push.send(io.encode(msg))
            io.decode(self.pull.recv(), "detokenizer")
            self.seconds += time.perf_counter() - started

    class Inbox:
        def recv(self, block=False):
            return []

    outbox = Outbox()
    sched = Scheduler(SchedulerConfig(max_running_requests=max(64, batch)), runner, None, Inbox(), outbox)
    rng = random.Random(seed)
    shared = [rng.randrange(100, runner.vocab_size) for _ in range(shared_len)]
    for i in range(batch):
        ids = shared + [rng.randrange(100, runner.vocab_size) for _ in range(prompt_len)]
        sched.handle_generate(io.TokenizedGenerateReq(f"r{i}", ids, {"max_new_tokens": 4096, "temperature": 0,
                                                                     "ignore_eos": True}, stream=True))
    while any(not r.prefill_done for r in sched.running + sched.waiting):
        sched.step()
    timers = {"forward_step": Timer(runner, "launch"), "model": Timer(runner.model, "forward"),
              "lm_head": Timer(runner.model, "compute_logits"),   # the model's last layer, outside forward()
              "attention": Timer(runner.model.attn_backend, "forward"), "sampling": Timer(runner, "_sample_rows")}
    rows = []
    for _ in range(steps):
        for t in timers.values():
            t.total = 0.0
        outbox.seconds = 0.0
        started = time.perf_counter()
        sched.step()
        total = time.perf_counter() - started
        assert len(sched.running) == batch  # every step decoded the whole batch
        fwd = timers["forward_step"].total
        model = timers["model"].total + timers["lm_head"].total
        rows.append({"total": total, "model": model - timers["attention"].total,
                     "attention": timers["attention"].total, "sampling": timers["sampling"].total,
                     "batch_build": fwd - model - timers["sampling"].total,
                     "ipc": outbox.seconds, "scheduler": total - fwd - outbox.seconds})
    for r in list(sched.running):
        sched._finish(r, {"type": "abort"})
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--shared-prefix", type=int, default=0,
                    help="tokens of one prompt every request starts with (a system prompt), before its own --prompt-len")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from radixlm.runtime.models.loader import resolve_model_path
    from radixlm.runtime.runner.model_runner import ModelRunner

    runner = ModelRunner(str(resolve_model_path()), dtype=args.dtype, max_total_tokens=80_000, num_rows=80)
    machine = machine_info()
    results = []
    for batch in map(int, args.batches.split(",")):
        runs = [profile(runner, batch, args.steps, args.prompt_len, seed, args.shared_prefix)
                for seed in range(args.runs)]
        row = {k: statistics.median(r[k] for r in runs) * 1e3 for k in runs[0]}
        row["outside_model_pct"] = 100 * (row["sampling"] + row["batch_build"] + row["ipc"] + row["scheduler"]) / row["total"]
        results.append({"batch": batch, **row})
        print(f"batch {batch}: {row}", flush=True)
    cols = [("batch", "batch", "{}"), ("total", "step ms", "{:.2f}"), ("model", "model ms", "{:.2f}"),
            ("attention", "attention ms", "{:.2f}"), ("sampling", "sampling ms", "{:.2f}"),
            ("batch_build", "batch build ms", "{:.2f}"), ("scheduler", "scheduler ms", "{:.2f}"),
            ("ipc", "IPC ms", "{:.2f}"), ("outside_model_pct", "outside model %", "{:.1f}")]
    print(f"{machine.get('cpu')}, load {machine.get('loadavg_1_5_15')}, dtype {args.dtype}")
    print_table(results, cols)
    write_json(args.out, {"machine": machine, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
