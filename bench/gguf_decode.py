"""A decode step of the default model (SmolLM2-135M) with its GGUF weights kept quantized (--quantization gguf)
against the same weights dequantized to bfloat16 (the default load: oneDNN-packed weights and the native decode
call), on this machine, in one run, and what each holds in memory.

Each batch size: B requests of --context tokens prefilled, then --steps decode steps timed (median); the model is
built as the server builds it (runner/model_setup.build_model).  RSS is this process's growth while the model
loads, after the modules it imports (anonymous memory, the weights' share; file-backed pages of libraries first
touched reported apart).  The quantized weights run two ways: every layer in one native call (the default) and op by
op (what a step the call does not take runs).

    .venv/bin/python bench/gguf_decode.py --batches 1,32 --out bench/results/gguf_decode.json
    .venv/bin/python bench/gguf_decode.py --gguf path/to/model.Q8_0.gguf --batches 1   # another file
"""

import argparse
import gc
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _common import machine_info, print_table, write_json  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]   # bench/kernels.py would shadow `kernels`


def _rss() -> dict:
    with open("/proc/self/status") as f:
        rows = dict(line.split(":", 1) for line in f if line.startswith("Rss"))
    return {k: int(v.split()[0]) / 1024 for k, v in rows.items()}   # MiB


def _load(path, dtype, gguf, fused=True):
    import radixlm.runtime.models.llama  # noqa: F401  (the imports' memory is not the weights')
    from radixlm.runtime.models.loader import read_model_config
    from radixlm.runtime.models.registry import get_model_class
    from radixlm.runtime.runner.model_setup import build_model

    get_model_class(read_model_config(path).architecture)
    gc.collect()
    before = _rss()
    model, config, pool = build_model(path, dtype, "cpu", "auto", lambda cfg: 8192 * 4 + 1, gguf=gguf)
    if not fused:
        model.native_decode = None   # the op-by-op path
    gc.collect()
    after = _rss()
    pool_mib = sum(b.numel() * b.element_size() for b in pool.k_buffers + pool.v_buffers) / 2**20
    return model, {"rss_anon_mib": after["RssAnon"] - before["RssAnon"] - pool_mib,
                   "rss_file_mib": after["RssFile"] - before["RssFile"], "kv_pool_mib": pool_mib}


def _step_ms(model, batch: int, context: int, steps: int) -> float:
    import torch

    from radixlm.runtime.runner.forward_batch import ForwardBatch

    table = torch.zeros(batch + 1, context + steps + 2, dtype=torch.int32)   # [rows, context]
    gen = torch.Generator().manual_seed(batch)
    ids = torch.randint(100, 40000, (batch, context), generator=gen)        # [B, context]
    slot = 0
    with torch.inference_mode():
        for r in range(batch):
            locs = list(range(slot, slot + context))
            table[r, :context] = torch.tensor(locs, dtype=torch.int32)
            fb = ForwardBatch.build(ids[r].tolist(), [0], [context], [r], locs, table)
            model.compute_logits(model.forward(fb)[fb.logits_indices])
            slot += context
        times, next_ids = [], [1] * batch
        for s in range(steps):
            locs = list(range(slot, slot + batch))
            for r in range(batch):
                table[r, context + s] = locs[r]
            fb = ForwardBatch.build(next_ids, [context + s] * batch, [1] * batch, list(range(batch)), locs, table)
            start = time.perf_counter()
            logits = model.compute_logits(model.forward(fb)[fb.logits_indices])   # [B, V]
            times.append(time.perf_counter() - start)
            next_ids = logits.argmax(-1).tolist()
            slot += batch
    return 1000 * statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=None, help="a .gguf file (default: the embedded model's Q4_1)")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    from radixlm.kernels import cpu_quant
    from radixlm.runtime.model_paths import gguf_file, resolve_model_path

    gguf = args.gguf or str(gguf_file("smollm2-135m-instruct"))
    path = resolve_model_path(gguf)
    rows = []
    for name, source, fused in (("gguf, native call", gguf, True), ("gguf, op by op", gguf, False),
                                ("bf16 dequantized", None, True)):
        model, mem = _load(path, torch.bfloat16, source, fused)
        for batch in map(int, args.batches.split(",")):
            rows.append({"weights": name, "batch": batch, "step_ms": round(_step_ms(model, batch, args.context,
                                                                                    args.steps), 2),
                         **{k: round(v, 1) for k, v in mem.items()}})
        del model
        gc.collect()
    print_table(rows, [(k, k, "{}") for k in ("weights", "batch", "step_ms", "rss_anon_mib", "rss_file_mib",
                                                "kv_pool_mib")])
    file_mib = os.path.getsize(gguf) / 2**20
    print(f"file {os.path.basename(gguf)}: {file_mib:.1f} MiB; quantized kernels: {cpu_quant.best_isa()}; "
          f"threads {torch.get_num_threads()}")
    if args.out:
        write_json(args.out, {"machine": machine_info(), "gguf": gguf, "file_mib": file_mib,
                              "isa": cpu_quant.best_isa(), "context": args.context, "rows": rows})


if __name__ == "__main__":
    main()
