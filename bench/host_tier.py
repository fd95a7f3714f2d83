"""The host KV tier's copies on CUDA: pinned host<->device bandwidth, then a 2,000-token prefix saved to
and brought back from host memory through runtime/runner/kv_blocks.py (read_blocks(pinned=True) and
write_blocks, what the host tier calls), on the SmolLM2-135M shape and a Llama-3.1-8B shape.  Reports
ms and % of the measured pinned bandwidth, and checks that the bytes come back unchanged.  Recompute time
is not measured here (it needs the model).  Without CUDA: prints a line and exits 0.

    python bench/host_tier.py [--tokens 2000] [--block 64] [--out bench_host_tier.json]
"""

import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = {"smollm2-135m": (30, 3, 64), "llama-3.1-8b": (32, 8, 128)}  # layers, KV heads, head dim (bf16)


def _median_ms(fn, iters):
    fn()
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def pinned_bandwidth(nbytes=256 << 20, iters=10):
    """(H2D GB/s, D2H GB/s) of one pinned nbytes copy."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)  # [N]
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # [N]
    h2d = _median_ms(lambda: dev.copy_(host, non_blocking=True), iters)
    d2h = _median_ms(lambda: host.copy_(dev, non_blocking=True), iters)
    return nbytes / h2d / 1e6, nbytes / d2h / 1e6


def bench_shape(name, layers, heads, head_dim, tokens, block, iters, bw):
    from radixlm.runtime.runner import kv_blocks
    from radixlm.runtime.runner.memory_pool import KVPool

    pool = KVPool(layers, 4 * tokens, heads, head_dim, dtype=torch.bfloat16, device="cuda")
    for buf in (*pool.k_buffers, *pool.v_buffers):
        buf.normal_()  # [S, H, D]
    n = tokens // block * block
    perm = torch.randperm(4 * tokens).tolist()
    slots, other = perm[:n], perm[n:2 * n]  # disjoint: the copy back must not overwrite its source
    payloads = kv_blocks.read_blocks(pool, slots, block, pinned=True)
    nbytes = sum(memoryview(p).nbytes for p in payloads)
    save_ms = _median_ms(lambda: kv_blocks.read_blocks(pool, slots, block, pinned=True), iters)
    restore_ms = _median_ms(lambda: kv_blocks.write_blocks(pool, other, payloads), iters)
    same = all(torch.equal(pool.k_buffers[i][slots], pool.k_buffers[i][other]) and
               torch.equal(pool.v_buffers[i][slots], pool.v_buffers[i][other]) for i in range(layers))
    disk = [bytes(p) for p in payloads]  # the disk tier's pageable, read-only payloads
    restore_pageable_ms = _median_ms(lambda: kv_blocks.write_blocks(pool, other, disk), iters)
    h2d, d2h = bw
    return dict(shape=name, layers=layers, kv_heads=heads, head_dim=head_dim, tokens=n, block=block,
                mbytes=nbytes / 1e6, restore_ms=restore_ms, restore_pct_h2d=100 * nbytes / restore_ms / 1e6 / h2d,
                save_ms=save_ms, save_pct_d2h=100 * nbytes / save_ms / 1e6 / d2h,
                restore_pageable_ms=restore_pageable_ms, bytes_round_trip=same)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--block", type=int, default=64, help="tokens per host block (--kv-disk-block)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--out", default="bench_host_tier.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    bw = pinned_bandwidth()
    print(f"pinned H2D {bw[0]:.1f} GB/s, D2H {bw[1]:.1f} GB/s")
    rows = [bench_shape(name, *shape, args.tokens, args.block, args.iters, bw) for name, shape in SHAPES.items()]
    for r in rows:
        print(f"{r['shape']:<14} {r['tokens']} tokens {r['mbytes']:.1f} MB: restore {r['restore_ms']:.2f} ms "
              f"({r['restore_pct_h2d']:.0f}% of H2D), save {r['save_ms']:.2f} ms ({r['save_pct_d2h']:.0f}% of D2H), "
              f"restore from pageable bytes {r['restore_pageable_ms']:.2f} ms, bytes equal: {r['bytes_round_trip']}")
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), h2d_gbps=bw[0], d2h_gbps=bw[1], results=rows), f,
                  indent=1)
    print(f"wrote {args.out}")
    return 0 if all(r["bytes_round_trip"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
