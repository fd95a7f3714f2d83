"""What --deterministic costs: one model forward (prefill, decode at several batch sizes) with the mode off
and on, in one process, on the default model (SmolLM2-135M).

The two models are built side by side and timed in alternation (median of --runs), so a shared host's
load hits both alike; the KV pool holds random values and every request's context is random slots.
"gemm only" is the deterministic model with its usual attention kernels back: the fixed-row GEMMs' share
of the cost (the rest is the per-token attention).

    python bench/deterministic_cost.py [--dtype float32] [--runs 7] [--threads N] [--out cost.json]
"""

import argparse
import statistics
import time

from _common import machine_info, print_table, write_json

SLOTS = 20_000


def build(dtype, deterministic):
    import torch

    from radixlm.runtime.models.loader import resolve_model_path
    from radixlm.runtime.runner.model_setup import build_model

    model, config, pool = build_model(str(resolve_model_path()), dtype, "cpu", "auto", lambda cfg: SLOTS,
                                      deterministic)
    g = torch.Generator().manual_seed(0)
    for buf in pool.k_buffers + pool.v_buffers:
        buf.copy_(torch.randn(buf.shape, generator=g).to(buf.dtype))
    return model, config


def batch(config, prefix, ext, seed):
    """A ForwardBatch of len(prefix) requests on random slots: request b brings ext[b] new tokens."""
    import torch

    from radixlm.runtime.runner.forward_batch import ForwardBatch

    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, SLOTS, (len(prefix), max(p + e for p, e in zip(prefix, ext))), generator=g,
                          dtype=torch.int32)                                       # [B, L]
    ids = torch.randint(100, config.vocab_size, (sum(ext),), generator=g).tolist()
    loc = [int(table[b, p + i]) for b, (p, e) in enumerate(zip(prefix, ext)) for i in range(e)]
    return ForwardBatch.build(ids, prefix, ext, list(range(len(prefix))), loc, table)


def step_seconds(model, fb, attention_ops=None) -> float:
    """One forward + logits; attention_ops replaces the model's attention kernels for this step."""
    backend = model.attn_backend
    saved = backend.ops
    backend.ops = attention_ops or saved
    try:
        start = time.perf_counter()
        model.compute_logits(model.forward(fb)[fb.logits_indices])
        return time.perf_counter() - start
    finally:
        backend.ops = saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 measures a shared host best)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    from radixlm.kernels.dispatch import get_attention_ops

    off, config = build(dtype, False)
    on, _ = build(dtype, True)
    modes = {"off": (off, None), "on": (on, None), "gemm_only": (on, get_attention_ops("auto", "cpu"))}
    shapes = [("prefill 512", [0], [512]), ("prefill 128 on 1024 cached", [1024], [128]),
              ("decode x1 at 512", [512], [1]), ("decode x8 at 512", [512] * 8, [1] * 8),
              ("decode x32 at 512", [512] * 32, [1] * 32)]
    results = []
    for name, prefix, ext in shapes:
        fb = batch(config, prefix, ext, seed=1)
        times = {mode: [] for mode in modes}
        for _ in range(args.runs + 1):                     # the first round warms up and is dropped
            for mode, (model, ops) in modes.items():
                times[mode].append(step_seconds(model, fb, ops))
        ms = {mode: statistics.median(t[1:]) * 1e3 for mode, t in times.items()}
        results.append({"step": name, "off_ms": ms["off"], "on_ms": ms["on"], "gemm_only_ms": ms["gemm_only"],
                        "ratio": ms["on"] / ms["off"]})
        print(results[-1], flush=True)
    machine = machine_info()
    print(f"{machine.get('cpu')}, load {machine.get('loadavg_1_5_15')}, dtype {args.dtype}, "
          f"{torch.get_num_threads()} threads")
    print_table(results, [("step", "step", "{}"), ("off_ms", "off ms", "{:.1f}"), ("on_ms", "on ms", "{:.1f}"),
                          ("ratio", "on / off", "{:.2f}"), ("gemm_only_ms", "gemm only ms", "{:.1f}")])
    write_json(args.out, {"machine": machine, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
