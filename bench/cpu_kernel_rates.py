"""Rates of three CPU kernels in isolation, in this process, medians of --reps calls:

  attention  the native decode attention over 30 layers' KV (SmolLM2's 9 query / 3 KV heads, head dim 64, bfloat16,
             one pool per layer so that a step reads them from memory), batch B at context C: ms and GB/s of K/V read
  one-row    a GGUF product of one input row (bfloat16) by a [24576, 768] weight in each format, four copies taken in
             turn (80 MB in all): ms and GB/s of weights read
  tiles      a GGUF product of --tile-rows input rows (bfloat16) by a [3072, K] weight in each format (K 576, 1536 for
             the 256-element K formats), by the int8 tiles where the build has them and by the dense tiles, in
             turn: ms and GFLOP/s

    .venv/bin/python bench/cpu_kernel_rates.py --out bench/results/cpu_kernel_rates.json
    .venv/bin/python bench/cpu_kernel_rates.py --only attention --attention 1:2048,8:4096
    .venv/bin/python bench/cpu_kernel_rates.py --only tiles --tile-rows 16,64,256 --formats Q8_0,Q4_K
"""

import argparse
import os
import statistics
import sys
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _common import machine_info, print_table, write_json  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]   # bench/kernels.py would shadow `kernels`
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests", "kernels"))


def _median_ms(fn, reps: int, warm: int = 3) -> float:
    times = []
    for i in range(reps + warm):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[warm:])


def attention(batch: int, ctx: int, reps: int) -> dict:
    from radixlm.kernels import cpu_native

    g = torch.Generator().manual_seed(0)
    layers, hq, hkv, d = 30, 9, 3, 64
    slots = ctx * batch + 8
    ks = [torch.randn(slots, hkv, d, generator=g).to(torch.bfloat16) for _ in range(layers)]   # [slots, Hkv, D]
    vs = [torch.randn(slots, hkv, d, generator=g).to(torch.bfloat16) for _ in range(layers)]
    q = torch.randn(batch, hq, d, generator=g).to(torch.bfloat16)                               # [B, Hq, D]
    table = torch.arange(batch * ctx, dtype=torch.int32).reshape(batch, ctx)
    rows, lens = torch.arange(batch), torch.full((batch,), ctx)

    def step(_):
        for k, v in zip(ks, vs):
            cpu_native.decode_attention(q, k, v, table, rows, lens, d ** -0.5)

    ms = _median_ms(step, reps)
    gb = layers * batch * ctx * hkv * d * 2 * 2 / 1e9
    return {"kernel": "attention", "case": f"batch {batch}, {ctx} keys", "ms": ms, "rate": f"{gb / ms * 1e3:.1f} GB/s"}


def one_row(fmt: str, reps: int) -> dict:
    from test_cpu_quant import random_blocks

    from radixlm.kernels import cpu_quant

    n, k = 24576, 768
    g = torch.Generator().manual_seed(1)
    copies = [random_blocks(fmt, n, k, g) for _ in range(4)]
    descs = [cpu_quant.layer_linear_weights([(fmt, w)]) for w in copies]
    x = torch.randn(1, k, generator=g).to(torch.bfloat16)
    isa = cpu_quant.best_isa()
    ms = _median_ms(lambda i: cpu_quant.layer_linear(x, descs[i % 4], k, isa), reps)
    nbytes = copies[0].numel()
    return {"kernel": f"one-row {isa}", "case": f"{fmt} [{n}, {k}]", "ms": ms, "rate": f"{nbytes / ms / 1e6:.1f} GB/s"}


def tiles(fmt: str, m: int, reps: int) -> list:
    from test_cpu_quant import random_blocks

    from radixlm.kernels import cpu_quant

    n, k = 3072, 1536 if cpu_quant.FORMATS[fmt][1] == 256 else 576
    g = torch.Generator().manual_seed(2)
    desc = cpu_quant.layer_linear_weights([(fmt, random_blocks(fmt, n, k, g))])
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    isa = cpu_quant.best_isa()
    rows, before = [], (cpu_quant.dense_rows(isa), cpu_quant.int8_tiles(isa))
    kinds = (("int8", True), ("dense", False)) if before[1] else (("dense", False),)
    try:
        cpu_quant.set_dense_rows(isa, 1)
        for name, on in kinds:
            cpu_quant.set_int8_tiles(isa, on)
            ms = _median_ms(lambda _: cpu_quant.layer_linear(x, desc, k, isa), reps)
            rows.append({"kernel": f"{name} tiles {isa}", "case": f"{fmt} [{n}, {k}] x {m} rows", "ms": ms,
                         "rate": f"{2 * n * k * m / ms / 1e6:.0f} GFLOP/s"})
    finally:
        cpu_quant.set_dense_rows(isa, before[0])
        cpu_quant.set_int8_tiles(isa, before[1])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["attention", "one-row", "tiles"], default=None)
    ap.add_argument("--attention", default="1:256,1:2048,1:4096,8:1024,8:4096", help="batch:context,...")
    ap.add_argument("--formats", default="Q8_0,Q4_0,Q4_1,Q5_0,Q4_K,Q6_K")
    ap.add_argument("--tile-rows", default="256")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    if args.only in (None, "attention"):
        for spec in args.attention.split(","):
            batch, ctx = map(int, spec.split(":"))
            rows.append(attention(batch, ctx, args.reps))
            print(rows[-1], flush=True)
    if args.only in (None, "one-row"):
        for fmt in args.formats.split(","):
            rows.append(one_row(fmt, args.reps))
            print(rows[-1], flush=True)
    if args.only in (None, "tiles"):
        for fmt in args.formats.split(","):
            for m in map(int, args.tile_rows.split(",")):
                rows.extend(tiles(fmt, m, args.reps))
                print(rows[-1], flush=True)
    machine = machine_info()
    print(f"{machine.get('cpu')}, load {machine.get('loadavg_1_5_15')}, threads {torch.get_num_threads()}")
    print_table(rows, [("kernel", "kernel", "{}"), ("case", "case", "{}"), ("ms", "ms", "{:.2f}"), ("rate", "rate", "{}")])
    write_json(args.out, {"machine": machine, "args": vars(args), "results": rows})


if __name__ == "__main__":
    main()
