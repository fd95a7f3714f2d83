"""Time the Triton paged-attention kernels on CUDA against the card's own limits.

Decode and store_kv are memory bound: reported as achieved bandwidth against the measured
device-to-device copy bandwidth.  Extend is compute bound: reported as TFLOP/s against the
measured bf16 matmul rate, with torch's flash SDPA (causal, contiguous q/k/v) as the peer on the
prefix-free shapes.  Each call is timed twice, L2 flushed before each run: `us`, the GPU time of the
call replayed from a CUDA graph (as the server runs decode: no host launch cost), and `eager_us`, the
call launched from Python (host launch cost included where it exceeds the GPU's work).  Percentages use
`us`.  The launch config each call used is printed.  --tune times every candidate config of the kernel
modules (DECODE_CANDIDATES, EXTEND_CANDIDATES) on each shape and prints the fastest, to set the
tables.  Prints a table and writes JSON (--out).  Without CUDA: prints a line and exits 0.

--fp8: FP8 against bf16 instead (bench/kernels_fp8.py): decode over an e4m3 KV pool at context 8,192, and
an 8B layer's linear products with FP8 weights.

    python bench/kernels.py [--quick] [--tune] [--fp8] [--out bench_kernels.json]
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
    (1, 8192, 4096), (2, 1024, 4096),
]
QUICK_EXTEND = [(1, 0, 512), (1, 0, 4096), (1, 0, 16384), (8, 1024, 256), (16, 4096, 128), (4, 8192, 512),
                (1, 8192, 4096), (64, 2048, 32)]
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

    def graph(self, fn):
        """Median ms of fn's GPU work: fn captured once in a CUDA graph, the graph replayed."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # compile and allocate outside the capture
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        ms = self(g.replay)
        del g
        return ms


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


def _cfg(cfg):
    return "/".join(str(v) for v in cfg.__dict__.values())


def decode_shapes(args):
    for (hq, hkv), head_dim, bsz, ctx in itertools.product(HEAD_CONFIGS, args.head_dims, args.batches, args.contexts):
        if 2 * bsz * ctx * hkv * head_dim * 2 <= args.max_kv_gib * GIB:
            yield hq, hkv, head_dim, bsz, ctx


def _decode_inputs(hq, hkv, head_dim, bsz, ctx, args, device="cuda"):
    pool = make_pool([ctx] * bsz, hkv, head_dim, args.page_size, torch.bfloat16, device)
    q = torch.randn(bsz, hq, head_dim, dtype=torch.bfloat16, device=device)  # [B, Hq, D]
    lens = torch.full((bsz,), ctx, dtype=torch.int32, device=device)  # [B]
    return (q, *pool, lens, head_dim ** -0.5)


def bench_decode(ops, ref, timer, args, limits):
    from radixlm.kernels import triton_decode as td

    rows = []
    for hq, hkv, head_dim, bsz, ctx in decode_shapes(args):
        call = _decode_inputs(hq, hkv, head_dim, bsz, ctx, args)
        ms = timer.graph(lambda: ops.decode_attention(*call))  # as under CUDA graphs: no host max_seq_len
        eager_ms = timer(lambda: ops.decode_attention(*call, max_seq_len=ctx))
        moved = 2 * bsz * ctx * hkv * head_dim * 2 + bsz * ctx * 4 + 2 * call[0].numel() * 2  # K, V, table, q, out
        gbps = moved / ms / 1e6
        torch_ms = None
        if bsz * ctx * hq * head_dim * 2 * 4 <= args.torch_max_gib * GIB:
            torch_ms = timer(lambda: ref.decode_attention(*call))
        rows.append(dict(kernel="decode", hq=hq, hkv=hkv, head_dim=head_dim, batch=bsz, context=ctx,
                         ms=ms, eager_ms=eager_ms, gbps=gbps, pct_of_copy=100 * gbps / limits["copy_gbps"],
                         torch_ms=torch_ms, config=_cfg(td.decode_config("cuda", head_dim)),
                         splits=td.default_num_splits(bsz, hkv, "cuda", None, head_dim),
                         eager_splits=td.default_num_splits(bsz, hkv, "cuda", ctx, head_dim)))
    return rows


def extend_flops(hq, head_dim, shapes):
    """QK^T and PV multiply-adds over the visible keys of every new token."""
    return sum(4 * hq * head_dim * (e * p + e * (e + 1) / 2) for p, e in shapes)


def extend_shapes(args):
    for (hq, hkv), head_dim, (bsz, prefix, ext) in itertools.product(HEAD_CONFIGS, args.head_dims, args.extend_shapes):
        if 2 * bsz * (prefix + ext) * hkv * head_dim * 2 <= args.max_kv_gib * GIB:
            yield hq, hkv, head_dim, bsz, prefix, ext


def _extend_inputs(hq, hkv, head_dim, bsz, prefix, ext, args, device="cuda"):
    pool = make_pool([prefix + ext] * bsz, hkv, head_dim, args.page_size, torch.bfloat16, device)
    q = torch.randn(bsz * ext, hq, head_dim, dtype=torch.bfloat16, device=device)  # [T, Hq, D]
    prefix_lens = torch.full((bsz,), prefix, dtype=torch.int32, device=device)  # [B]
    extend_lens = torch.full((bsz,), ext, dtype=torch.int32, device=device)  # [B]
    starts = torch.arange(bsz, dtype=torch.int32, device=device) * ext  # [B] the step's metadata
    return (q, *pool, prefix_lens, extend_lens, head_dim ** -0.5), dict(max_extend_len=ext, extend_start=starts)


def sdpa_peer_ms(timer, hq, hkv, head_dim, bsz, ext):
    """torch's flash SDPA, causal, on contiguous [B, H, S, D] q/k/v (GQA native, else K/V expanded
    outside the timed call); None where the flash backend refuses."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q = torch.randn(bsz, hq, ext, head_dim, dtype=torch.bfloat16, device="cuda")  # [B, Hq, S, D]
    k = torch.randn(bsz, hkv, ext, head_dim, dtype=torch.bfloat16, device="cuda")  # [B, Hkv, S, D]
    v = torch.randn_like(k)  # [B, Hkv, S, D]
    tries = [lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)]
    ke, ve = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)  # [B, Hq, S, D]
    tries.append(lambda: sdpa(q, ke, ve, is_causal=True))
    for fn in tries:
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return timer.graph(fn)
        except RuntimeError:
            continue
    return None


def bench_extend(ops, ref, timer, args, limits):
    from radixlm.kernels import triton_extend as te

    rows = []
    for hq, hkv, head_dim, bsz, prefix, ext in extend_shapes(args):
        call, meta = _extend_inputs(hq, hkv, head_dim, bsz, prefix, ext, args)
        ms = timer.graph(lambda: ops.extend_attention(*call, **meta))
        eager_ms = timer(lambda: ops.extend_attention(*call, **meta))
        tflops = extend_flops(hq, head_dim, [(prefix, ext)] * bsz) / ms / 1e9
        torch_ms = None
        if hq * ext * (prefix + ext) * 4 * 4 <= args.torch_max_gib * GIB:  # per-request scores
            torch_ms = timer(lambda: ref.extend_attention(*call))
        sdpa_ms = sdpa_peer_ms(timer, hq, hkv, head_dim, bsz, ext) if prefix == 0 else None
        rows.append(dict(kernel="extend", hq=hq, hkv=hkv, head_dim=head_dim, batch=bsz, prefix=prefix,
                         extend=ext, ms=ms, eager_ms=eager_ms, tflops=tflops,
                         pct_of_matmul=100 * tflops / limits["matmul_tflops"], torch_ms=torch_ms,
                         sdpa_ms=sdpa_ms, config=_cfg(te.extend_config("cuda", head_dim, ext))))
    return rows


def bench_store(ops, ref, timer, args, limits, device="cuda"):
    dtype, elsize, rows = torch.bfloat16, 2, []
    for (_, hkv), head_dim, tokens in itertools.product(HEAD_CONFIGS, args.head_dims, STORE_TOKENS):
        num_slots = 4 * tokens
        bufs = [torch.zeros(num_slots, hkv, head_dim, dtype=dtype, device=device) for _ in range(2)]
        loc = torch.randperm(num_slots, device=device)[:tokens]  # [T]
        k = torch.randn(tokens, hkv, head_dim, dtype=dtype, device=device)  # [T, Hkv, D]
        v = torch.randn_like(k)  # [T, Hkv, D]
        ms = timer.graph(lambda: ops.store_kv(*bufs, loc, k, v))
        eager_ms = timer(lambda: ops.store_kv(*bufs, loc, k, v))
        gbps = 2 * 2 * k.numel() * elsize / ms / 1e6  # k and v, read + write
        torch_ms = timer(lambda: ref.store_kv(*bufs, loc, k, v))
        rows.append(dict(kernel="store_kv", hkv=hkv, head_dim=head_dim, tokens=tokens, ms=ms, eager_ms=eager_ms,
                         gbps=gbps, pct_of_copy=100 * gbps / limits["copy_gbps"], torch_ms=torch_ms, config="-"))
    return rows


def _time_candidates(timer, fn, candidates):
    """{config string: ms or None (failed to compile or run)} for fn(config) on each candidate."""
    out = {}
    for cfg in candidates:
        try:
            out[_cfg(cfg)] = timer.graph(lambda: fn(cfg))
        except Exception as exc:  # noqa: BLE001 - a candidate that does not fit this card is skipped
            print(f"  {_cfg(cfg)}: failed ({type(exc).__name__}: {str(exc)[:120]})")
            out[_cfg(cfg)] = None
    return out


def tune(ops, timer, args):
    """Time every candidate config on every shape; per shape the fastest, per table key the config with
    the best geometric mean of (time / the shape's best time)."""
    from radixlm.kernels import triton_decode as td
    from radixlm.kernels import triton_extend as te

    shapes = []
    for hq, hkv, head_dim, bsz, ctx in decode_shapes(args):
        call = _decode_inputs(hq, hkv, head_dim, bsz, ctx, args)
        times = _time_candidates(timer, lambda c: ops.decode_attention(*call, config=c), td.DECODE_CANDIDATES)
        shapes.append(dict(kernel="decode", key=f"decode d={head_dim}", hq=hq, hkv=hkv, head_dim=head_dim,
                           batch=bsz, context=ctx, times=times))
    for hq, hkv, head_dim, bsz, prefix, ext in extend_shapes(args):
        call, meta = _extend_inputs(hq, hkv, head_dim, bsz, prefix, ext, args)
        times = _time_candidates(timer, lambda c: ops.extend_attention(*call, **meta, config=c),
                                 te.EXTEND_CANDIDATES)
        shapes.append(dict(kernel="extend", key=f"extend d={head_dim} {te.shape_class(ext)}", hq=hq, hkv=hkv,
                           head_dim=head_dim, batch=bsz, prefix=prefix, extend=ext, times=times))
        torch.cuda.empty_cache()
    best_by_key = {}
    print("tuning: fastest config per shape (decode block_n/warps/stages/min_chunk/waves, "
          "extend block_m/block_n/warps/stages)")
    for s in shapes:
        ok = {c: t for c, t in s["times"].items() if t}
        if not ok:
            continue
        s["best"], s["best_ms"] = min(ok.items(), key=lambda kv: kv[1])
        print(f"  {_shape(s):<44} best {s['best']:<16} {1e3 * s['best_ms']:9.1f} us   "
              + " ".join(f"{c}={1e3 * t:.0f}" for c, t in sorted(ok.items(), key=lambda kv: kv[1])[:4]))
        for c, t in s["times"].items():
            best_by_key.setdefault(s["key"], {}).setdefault(c, []).append(t / s["best_ms"] if t else None)
    table = {}
    for key, per in best_by_key.items():
        scores = {c: statistics.geometric_mean(r) for c, r in per.items() if all(x is not None for x in r)}
        if scores:
            table[key] = min(scores.items(), key=lambda kv: kv[1])
            print(f"table {key:<28} -> {table[key][0]} (geomean {table[key][1]:.3f}x of each shape's best)")
    return dict(shapes=shapes, table={k: dict(config=c, geomean_ratio=r) for k, (c, r) in table.items()})


def _shape(row):
    if row["kernel"] == "decode":
        return f"B={row['batch']} ctx={row['context']} {row['hq']}/{row['hkv']}h d={row['head_dim']}"
    if row["kernel"] == "extend":
        return (f"B={row['batch']} pre={row['prefix']} ext={row['extend']} "
                f"{row['hq']}/{row['hkv']}h d={row['head_dim']}")
    return f"T={row['tokens']} {row['hkv']}h d={row['head_dim']}"


def print_table(rows, limits):
    print(f"copy bandwidth {limits['copy_gbps']:.0f} GB/s, bf16 matmul {limits['matmul_tflops']:.1f} TFLOP/s; "
          "us: GPU time (CUDA graph replay), eager: launched from Python")
    print(f"{'kernel':<9} {'shape':<40} {'us':>8} {'eager':>8} {'rate':>14} {'% peak':>7} {'torch us':>9} "
          f"{'sdpa us':>8} {'x sdpa':>7}  config")
    for r in rows:
        rate = f"{r['tflops']:.1f} TFLOP/s" if "tflops" in r else f"{r['gbps']:.0f} GB/s"
        pct = r.get("pct_of_matmul", r.get("pct_of_copy"))
        torch_us = f"{1e3 * r['torch_ms']:.1f}" if r["torch_ms"] else "-"
        sdpa = r.get("sdpa_ms")
        sdpa_us, vs = (f"{1e3 * sdpa:.1f}", f"{sdpa / r['ms']:.2f}x") if sdpa else ("-", "-")
        extra = f" splits {r['splits']}/{r['eager_splits']}" if "splits" in r else ""
        print(f"{r['kernel']:<9} {_shape(r):<40} {1e3 * r['ms']:>8.1f} {1e3 * r['eager_ms']:>8.1f} {rate:>14} "
              f"{pct:>6.1f}% {torch_us:>9} {sdpa_us:>8} {vs:>7}  {r['config']}{extra}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench_kernels.json", help="JSON results file")
    p.add_argument("--quick", action="store_true", help="a few shapes only (about a minute on an H200)")
    p.add_argument("--tune", action="store_true", help="time every candidate launch config per shape")
    p.add_argument("--fp8", action="store_true", help="FP8 KV decode and FP8 GEMMs against bf16 (kernels_fp8.py)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--max-kv-gib", type=float, default=32.0, help="skip shapes with a larger KV pool")
    p.add_argument("--torch-max-gib", type=float, default=4.0,
                   help="time the torch reference only where its temporaries stay under this")
    p.add_argument("--head-dims", type=int, nargs="+", help="default 128 with --quick, else 64 128")
    args = p.parse_args(argv)
    args.head_dims = args.head_dims or ([128] if args.quick else [64, 128])
    args.batches = [1, 32, 256] if args.quick else DECODE_BATCHES
    args.contexts = [512, 8192] if args.quick else DECODE_CONTEXTS
    args.extend_shapes = QUICK_EXTEND if args.quick else EXTEND_SHAPES
    if args.quick:
        args.iters = min(args.iters, 10)
        args.torch_max_gib = min(args.torch_max_gib, 1.0)
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
    import triton

    result = dict(device=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()),
                  torch=torch.__version__, triton=triton.__version__, page_size=args.page_size, dtype="bfloat16",
                  **limits)
    if args.fp8:
        from kernels_fp8 import run_fp8
        result["results"] = run_fp8(timer, make_pool, args.page_size)
    elif args.tune:
        result["tune"] = tune(ops, timer, args)
    else:
        rows = []
        for bench in (bench_decode, bench_extend, bench_store):
            rows += bench(ops, ref, timer, args, limits)
            torch.cuda.empty_cache()
        print_table(rows, limits)
        result["results"] = rows
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
