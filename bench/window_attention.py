"""Sliding-window attention on the CPU: what a windowed layer costs with each kernel (issue 38).

One layer's attention at Gemma 2 2B's shape (8 query heads, 4 KV heads, head dim 256, window 4096) over a random
KV pool: decode batches and one extend chunk on contexts past the window, timed in alternation (median of --runs):

  full native      the native kernel over the whole context (what a model without a window runs: the peer)
  window native    radixlm_kernels/cpu_window.py: the native decode over a gathered table of the last W slots
                   (an extend: one such query per new token, per_token=True)
  window torch     the torch reference with the window mask (the fallback, and what soft-capped layers run)

    python bench/window_attention.py [--dtype bfloat16] [--context 6000] [--runs 5] [--out window.json]
"""

import argparse
import statistics
import time

from _common import machine_info, print_table, write_json

HQ, HKV, D, WINDOW = 8, 4, 256, 4096


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--context", type=int, default=6000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    from radixlm.kernels import cpu_native, cpu_window, torch_ref

    dtype = getattr(torch, args.dtype)
    batch, ctx = 4, args.context
    g = torch.Generator().manual_seed(0)
    k = torch.randn(batch * ctx, HKV, D, generator=g).to(dtype)  # [S, Hkv, D]
    v = torch.randn(batch * ctx, HKV, D, generator=g).to(dtype)  # [S, Hkv, D]
    table = torch.randperm(batch * ctx, generator=g).to(torch.int32).view(batch, ctx).contiguous()  # [B, C]
    rows = torch.arange(batch)
    cases = {}
    for b in (1, 4):
        q = torch.randn(b, HQ, D, generator=g).to(dtype)  # [b, Hq, D]
        lens = torch.full((b,), ctx)
        cases[f"decode x{b}"] = {
            "full native": lambda q=q, b=b, lens=lens: cpu_native.decode_attention(q, k, v, table, rows[:b], lens, 0.06),
            "window native": lambda q=q, b=b, lens=lens: cpu_window.decode_attention(
                q, k, v, table, rows[:b], lens, 0.06, window=WINDOW),
            "window torch": lambda q=q, b=b, lens=lens: torch_ref.decode_attention(
                q, k, v, table, rows[:b], lens, 0.06, window=WINDOW)}
    for ext in (4, 16, 128):
        qe = torch.randn(ext, HQ, D, generator=g).to(dtype)  # [E, Hq, D]
        prefix, extend = torch.tensor([ctx - ext]), torch.tensor([ext])
        cases[f"extend {ext}"] = {
            "full native": lambda qe=qe, prefix=prefix, extend=extend: cpu_window.cpu_extend.extend_attention(
                qe, k, v, table, rows[:1], prefix, extend, 0.06),
            "window native": lambda qe=qe, prefix=prefix, extend=extend: cpu_window.extend_attention(
                qe, k, v, table, rows[:1], prefix, extend, 0.06, window=WINDOW, per_token=True),
            "window torch": lambda qe=qe, prefix=prefix, extend=extend: torch_ref.extend_attention(
                qe, k, v, table, rows[:1], prefix, extend, 0.06, window=WINDOW)}
    results = []
    for name, fns in cases.items():
        times = {label: [] for label in fns}
        for _ in range(args.runs):
            for label, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - start)
        med = {label: statistics.median(t) * 1e3 for label, t in times.items()}
        results.append({"case": name, **{f"{label} ms": round(ms, 2) for label, ms in med.items()},
                        "torch / native": round(med["window torch"] / med["window native"], 2)})
    labels = ("full native", "window native", "window torch")
    print_table(results, [("case", "case", "{}")] + [(f"{x} ms", f"{x} ms", "{:.2f}") for x in labels]
                + [("torch / native", "torch / native", "{:.2f}x")])
    if args.out:
        write_json(args.out, {"machine": machine_info(), "dtype": args.dtype, "context": ctx, "window": WINDOW,
                              "results": results})


if __name__ == "__main__":
    main()
