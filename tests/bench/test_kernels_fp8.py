"""bench/kernels_fp8.py's rows on the CPU (Triton interpreter, tiny shapes, a timer that only calls): the bench
runs end to end and its FP8 decode agrees with the bf16 one to e4m3's precision, so a GPU run measures
working kernels.  The timings themselves are the GPU's (bench/gpu_check.sh, step fp8)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_fp8_bench_rows_on_the_interpreter():
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(BENCH)!r})
        import kernels, kernels_fp8

        class Calls:   # a timer stand-in: runs fn, reports 1 ms
            def __call__(self, fn):
                fn()
                return 1.0
            graph = __call__

        rows = kernels_fp8.bench_decode_fp8(Calls(), kernels.make_pool, 16, hq=4, hkv=1, head_dim=64, batches=(2,),
                                            context=40, device="cpu")
        rows += kernels_fp8.bench_gemm_fp8(Calls(), {{"qkv": (96, 64)}}, (3,), device="cpu")
        kernels_fp8.print_fp8(rows)
        print(json.dumps(rows))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    decode, gemm = json.loads(proc.stdout.strip().splitlines()[-1])
    assert decode["kernel"] == "decode-fp8-kv" and decode["ratio"] == 1.0
    # attention outputs are averages of values ~N(0, 1): e4m3 keeps them within a few 2^-4 steps
    assert 0 < decode["max_abs_diff_vs_bf16"] < 0.25
    assert gemm["kernel"] == "gemm-fp8-layer" and gemm["mode"] == "dequant"
