"""The cost of one gloo all-reduce between --ranks CPU processes, as --tp-size pays it twice a layer: fp32
[rows, H] tensors, median and p90 of --reps, each rank with one torch thread.

    .venv/bin/python bench/tp_allreduce.py --hidden 576 --rows 1,256 --out bench/results/tp_allreduce.json
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402


def rank_main(rank, world, port, hidden, rows_list, reps, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    result = {}
    for rows in rows_list:
        x = torch.randn(rows, hidden)           # [rows, H]
        for _ in range(20):
            dist.all_reduce(x)
        times = []
        for _ in range(reps):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t)
        times.sort()
        result[rows] = {"median_us": 1e6 * statistics.median(times), "p90_us": 1e6 * times[int(0.9 * len(times))]}
    if rank == 0:
        queue.put(result)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=576, help="H (default: SmolLM2's 576)")
    ap.add_argument("--rows", default="1,256", help="comma-separated row counts (default: 1,256)")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    rows = [int(r) for r in args.rows.split(",")]
    procs = [ctx.Process(target=rank_main, args=(r, args.ranks, port, args.hidden, rows, args.reps, queue))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(60)
    load = os.getloadavg()
    for r, v in result.items():
        print(f"[{r}, {args.hidden}] fp32, {args.ranks} ranks: median {v['median_us']:.0f} us, p90 {v['p90_us']:.0f} us")
    print(f"load average {load[0]:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"machine": machine_info(), "config": vars(args), "load": load,
                                              "result": result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
