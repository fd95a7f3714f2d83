"""Time the Triton paged-attention kernels on CUDA against the card's own limits.

Decode and store_kv are memory bound: reported as achieved bandwidth against the measured
device-to-device copy bandwidth.  Extend is compute bound: reported as TFLOP/s against the
measured bf16 matmul rate.  The torch reference is timed as the peer where its temporaries fit.
Prints a table and writes JSON (--out).  Without CUDA: prints a line and exits 0.

    python bench/kernels.py [--quick] [--out bench_kernels.json]
"""

import argparse
import itertools
import json
import statistics
import sys

import torch

GIB = 1 << 30
HEAD_CONFIGS = [(32, 8), (32, 4)]  # (num_q_heads, num_kv_heads): GQA 4 and 8
DECODE_BATCHES = [1, 8, 32, 64, 128, 256]
DECODE_CONTEXTS = [512, 2048, 8192, 32768]
EXTEND_SHAPES = [  # (batch, prefix_len, extend_len): prefill, cache-hit extends, chunked prefill
    (1, 0, 512), (1, 0, 4096), (4, 0, 2048), (1, 0, 16384),
    (8, 1024, 256), (16, 4096, 128), (4, 8192, 512), (1, 28672, 4096), (64, 2048, 32),
]
STORE_TOKENS = [1, 256, 8192]


class Timer:
    """Median milliseconds of fn() over iters runs, CUDA events, L2 flushed before each run."""

    def __init__(self, iters, warmup=3):
        self.iters, self.warmup = iters, warmup
        self.flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # > any L2

    def __call__(self, fn):
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.iters):
            self.flush_buf.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)


def measure_copy_gbps(timer, nbytes=4 * GIB):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # [N]
    dst = torch.empty_like(src)  # [N]
    ms = timer(lambda: dst.copy_(src))
    return 2 * nbytes / ms / 1e6  # read + write


def measure_matmul_tflops(timer, n=8192):
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")  # [n, n]
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")  # [n, n]
    ms = timer(lambda: a @ b)
    return 2 * n ** 3 / ms / 1e9


def make_pool(lens, num_kv_heads, head_dim, page_size, dtype, device):
    """KV pool and block table for requests of the given lengths, pages shuffled."""
    pages = [-(-n // page_size) for n in lens]
    num_slots = sum(pages) * page_size
    k_buffer = torch.empty(num_slots, num_kv_heads, head_dim, dtype=dtype, device=device).normal_()
    v_buffer = torch.empty_like(k_buffer).normal_()  # [num_slots, Hkv, D]
    order = torch.randperm(sum(pages), device=device)  # [P]
    req_to_token = torch.zeros(len(lens), max(lens), dtype=torch.int32, device=device)  # [B, C]
    used = 0
    for row, (n, n_pages) in enumerate(zip(lens, pages)):
        mine = order[used:used + n_pages]
        used += n_pages
        slots = (mine[:, None] * page_size + torch.arange(page_size, device=device)).flatten()[:n]  # [n]
        req_to_token[row, :n] = slots.to(torch.int32)
    req_pool_indices = torch.arange(len(lens), device=device)  # [B]
    return k_buffer, v_buffer, req_to_token, req_pool_indices


def bench_decode(ops, ref, timer, args, limits, device="cuda"):
    dtype, elsize, rows = torch.bfloat16, 2, []
    for (hq, hkv), head_dim, bsz, ctx in itertools.product(
            HEAD_CONFIGS, args.head_dims, args.batches, args.contexts):
        kv_bytes = 2 * bsz * ctx * hkv * head_dim * elsize
        if kv_bytes > args.max_kv_gib * GIB:
            continue
        pool = make_pool([ctx] * bsz, hkv, head_dim, args.page_size, dtype, device)
        q = torch.randn(bsz, hq, head_dim, dtype=dtype, device=device)  # [B, Hq, D]
        lens = torch.full((bsz,), ctx, dtype=torch.int32, device=device)  # [B]
        call = (q, *pool, lens, head_dim ** -0.5)
        ms = timer(lambda: ops.decode_attention(*call))
        moved = kv_bytes + bsz * ctx * 4 + 2 * q.numel() * elsize  # K, V, block table, q, out
        gbps = moved / ms / 1e6
        torch_ms = None
        if bsz * ctx * hq * head_dim * elsize * 4 <= args.torch_max_gib * GIB:
            torch_ms = timer(lambda: ref.decode_attention(*call))
        rows.append(dict(kernel="decode", hq=hq, hkv=hkv, head_dim=head_dim, batch=bsz, context=ctx,
                         ms=ms, gbps=gbps, pct_of_copy=100 * gbps / limits["copy_gbps"],
                         torch_ms=torch_ms))
        del pool, q
    return rows


def extend_flops(hq, head_dim, shapes):
    """QK^T and PV multiply-adds over the visible keys of every new token."""
    return sum(4 * hq * head_dim * (e * p + e * (e + 1) / 2) for p, e in shapes)


def bench_extend(ops, ref, timer, args, limits, device="cuda"):
    dtype, elsize, rows = torch.bfloat16, 2, []
    for (hq, hkv), head_dim, (bsz, prefix, ext) in itertools.product(
            HEAD_CONFIGS, args.head_dims, args.extend_shapes):
        if 2 * bsz * (prefix + ext) * hkv * head_dim * elsize > args.max_kv_gib * GIB:
            continue
        pool = make_pool([prefix + ext] * bsz, hkv, head_dim, args.page_size, dtype, device)
        q = torch.randn(bsz * ext, hq, head_dim, dtype=dtype, device=device)  # [T, Hq, D]
        prefix_lens = torch.full((bsz,), prefix, dtype=torch.int32, device=device)  # [B]
        extend_lens = torch.full((bsz,), ext, dtype=torch.int32, device=device)  # [B]
        call = (q, *pool, prefix_lens, extend_lens, head_dim ** -0.5)
        ms = timer(lambda: ops.extend_attention(*call, max_extend_len=ext))
        tflops = extend_flops(hq, head_dim, [(prefix, ext)] * bsz) / ms / 1e9
        torch_ms = None
        if hq * ext * (prefix + ext) * 4 * 4 <= args.torch_max_gib * GIB:  # per-request scores
            torch_ms = timer(lambda: ref.extend_attention(*call))
        rows.append(dict(kernel="extend", hq=hq, hkv=hkv, head_dim=head_dim, batch=bsz, prefix=prefix,
                         extend=ext, ms=ms, tflops=tflops,
                         pct_of_matmul=100 * tflops / limits["matmul_tflops"], torch_ms=torch_ms))
        del pool, q
    return rows


def bench_store(ops, ref, timer, args, limits, device="cuda"):
    dtype, elsize, rows = torch.bfloat16, 2, []
    for (_, hkv), head_dim, tokens in itertools.product(HEAD_CONFIGS, args.head_dims, STORE_TOKENS):
        num_slots = 4 * tokens
        bufs = [torch.zeros(num_slots, hkv, head_dim, dtype=dtype, device=device) for _ in range(2)]
        loc = torch.randperm(num_slots, device=device)[:tokens]  # [T]
        k = torch.randn(tokens, hkv, head_dim, dtype=dtype, device=device)  # [T, Hkv, D]
        v = torch.randn_like(k)  # [T, Hkv, D]
        ms = timer(lambda: ops.store_kv(*bufs, loc, k, v))
        gbps = 2 * 2 * k.numel() * elsize / ms / 1e6  # k and v, read + write
        torch_ms = timer(lambda: ref.store_kv(*bufs, loc, k, v))
        rows.append(dict(kernel="store_kv", hkv=hkv, head_dim=head_dim, tokens=tokens, ms=ms,
                         gbps=gbps, pct_of_copy=100 * gbps / limits["copy_gbps"], torch_ms=torch_ms))
    return rows


def _shape(row):
    if row["kernel"] == "decode":
        return f"B={row['batch']} ctx={row['context']} {row['hq']}/{row['hkv']}h d={row['head_dim']}"
    if row["kernel"] == "extend":
        return (f"B={row['batch']} pre={row['prefix']} ext={row['extend']} "
                f"{row['hq']}/{row['hkv']}h d={row['head_dim']}")
    return f"T={row['tokens']} {row['hkv']}h d={row['head_dim']}"


def print_table(rows, limits):
    print(f"copy bandwidth {limits['copy_gbps']:.0f} GB/s, bf16 matmul {limits['matmul_tflops']:.1f} TFLOP/s")
    print(f"{'kernel':<9} {'shape':<40} {'us':>9} {'rate':>14} {'% peak':>7} {'torch us':>10} {'speedup':>8}")
    for r in rows:
        rate = f"{r['tflops']:.1f} TFLOP/s" if "tflops" in r else f"{r['gbps']:.0f} GB/s"
        pct = r.get("pct_of_matmul", r.get("pct_of_copy"))
        torch_us = f"{1e3 * r['torch_ms']:.1f}" if r["torch_ms"] else "-"
        speedup = f"{r['torch_ms'] / r['ms']:.2f}x" if r["torch_ms"] else "-"
        print(f"{r['kernel']:<9} {_shape(r):<40} {1e3 * r['ms']:>9.1f} {rate:>14} {pct:>6.1f}% "
              f"{torch_us:>10} {speedup:>8}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench_kernels.json", help="JSON results file")
    p.add_argument("--quick", action="store_true", help="a few shapes only")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--max-kv-gib", type=float, default=32.0, help="skip shapes with a larger KV pool")
    p.add_argument("--torch-max-gib", type=float, default=4.0,
                   help="time the torch reference only where its temporaries stay under this")
    args = p.parse_args(argv)
    args.head_dims = [128] if args.quick else [64, 128]
    args.batches = [1, 32, 256] if args.quick else DECODE_BATCHES
    args.contexts = [512, 8192] if args.quick else DECODE_CONTEXTS
    args.extend_shapes = EXTEND_SHAPES[:2] + EXTEND_SHAPES[4:6] if args.quick else EXTEND_SHAPES
    return args


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    from radixlm.kernels import dispatch

    ops = dispatch.get_attention_ops("triton", "cuda")
    ref = dispatch.get_attention_ops("torch", "cuda")
    timer = Timer(args.iters)
    limits = dict(copy_gbps=measure_copy_gbps(timer), matmul_tflops=measure_matmul_tflops(timer))
    rows = []
    for bench in (bench_decode, bench_extend, bench_store):
        rows += bench(ops, ref, timer, args, limits)
        torch.cuda.empty_cache()
    print_table(rows, limits)
    import triton

    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                  triton=triton.__version__, page_size=args.page_size, dtype="bfloat16", **limits,
                  results=rows)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
