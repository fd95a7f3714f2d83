"""A/B of a GGUF decode step on a shared host: the quantized model with every layer in one native call, the same
model op by op, and the bfloat16 model (the same weights dequantized), timed step by step in turn in one process,
so that load from other processes falls on all three alike (bench/gguf_decode.py times them one after the other).

    .venv/bin/python bench/gguf_fused_ab.py --batches 1,8 --threads 1 --out bench/results/gguf_fused_ab.json
"""

import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _common import machine_info, print_table, write_json  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]   # bench/kernels.py would shadow `kernels`


def _steps(models: dict, batch: int, context: int, steps: int) -> dict:
    """name -> median ms of a decode step of `batch` rows after `context` prefilled tokens each (per model its own
    KV pool and block table), the models stepped in turn."""
    import torch

    from radixlm.runtime.runner.forward_batch import ForwardBatch

    ids = torch.randint(100, 40000, (batch, context), generator=torch.Generator().manual_seed(batch))  # [B, ctx]
    state = {}
    with torch.inference_mode():
        for name, model in models.items():
            table = torch.zeros(batch + 1, context + steps + 2, dtype=torch.int32)        # [rows, context]
            for r in range(batch):
                locs = list(range(r * context, (r + 1) * context))
                table[r, :context] = torch.tensor(locs, dtype=torch.int32)
                model.forward(ForwardBatch.build(ids[r].tolist(), [0], [context], [r], locs, table))
            state[name] = (table, [1] * batch, [])
        for s in range(steps):
            for name, model in models.items():
                table, next_ids, times = state[name]
                locs = list(range(batch * context + s * batch, batch * context + (s + 1) * batch))
                for r in range(batch):
                    table[r, context + s] = locs[r]
                fb = ForwardBatch.build(next_ids, [context + s] * batch, [1] * batch, list(range(batch)), locs, table)
                start = time.perf_counter()
                logits = model.compute_logits(model.forward(fb)[fb.logits_indices])          # [B, V]
                times.append(time.perf_counter() - start)
                state[name] = (table, logits.argmax(-1).tolist(), times)
    return {name: 1000 * statistics.median(times[1:]) for name, (_, _, times) in state.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=None, help="a .gguf file (default: the embedded model's Q4_1)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    from radixlm.runtime.model_paths import gguf_file, resolve_model_path
    from radixlm.runtime.runner.model_setup import build_model

    if args.threads:
        torch.set_num_threads(args.threads)
    gguf = args.gguf or str(gguf_file("smollm2-135m-instruct"))
    path = resolve_model_path(gguf)
    budget = (lambda cfg: 64 * (args.context + args.steps) + 1)
    fused = build_model(path, torch.bfloat16, "cpu", "auto", budget, gguf=gguf)[0]
    op_by_op = build_model(path, torch.bfloat16, "cpu", "auto", budget, gguf=gguf)[0]
    op_by_op.native_decode = None
    bf16 = build_model(path, torch.bfloat16, "cpu", "auto", budget)[0]
    rows = []
    for batch in map(int, args.batches.split(",")):
        ms = _steps({"gguf native call": fused, "gguf op by op": op_by_op, "bf16": bf16}, batch, args.context,
                    args.steps)
        rows.append({"batch": batch, **{k: round(v, 2) for k, v in ms.items()},
                     "native/op_by_op": round(ms["gguf op by op"] / ms["gguf native call"], 2),
                     "native/bf16": round(ms["bf16"] / ms["gguf native call"], 2)})
    print_table(rows, [(k, k, "{}") for k in rows[0]])
    print(f"file {os.path.basename(gguf)}; threads {torch.get_num_threads()}; ratios > 1: the native call is faster")
    if args.out:
        write_json(args.out, {"machine": machine_info(), "gguf": gguf, "context": args.context,
                              "threads": torch.get_num_threads(), "rows": rows})


if __name__ == "__main__":
    main()
