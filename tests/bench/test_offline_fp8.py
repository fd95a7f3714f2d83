"""bench/offline_throughput.py's FP8 options (issue 37), on CPU: which radixlm runs --fp8-compare makes, and the
speed-up it reports (the FP8 run's output tok/s over the plain run's of the same dtype and workload)."""

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import offline_throughput  # takes bench/ off sys.path again (bench/kernels.py shadows HF's `kernels`)
        yield offline_throughput
    finally:
        if str(ROOT / "bench") in sys.path:
            sys.path.remove(str(ROOT / "bench"))
        sys.modules.pop("offline_throughput", None)  # a later import runs its sys.path clean-up again


def _args(**kw):
    return argparse.Namespace(**{"quantization": None, "kv_cache_dtype": "auto", "fp8_compare": False, **kw})


def test_variants(bench):
    fp8 = {"quantization": "fp8", "kv_cache_dtype": "fp8_e4m3"}
    assert bench.radixlm_variants(_args(), ["bfloat16"]) == [("bfloat16", {})]
    assert bench.radixlm_variants(_args(fp8_compare=True), ["bfloat16"]) == [("bfloat16", {}), ("bfloat16", fp8)]
    assert bench.radixlm_variants(_args(kv_cache_dtype="fp8_e4m3"), ["float32", "bfloat16"]) == [
        ("float32", {"kv_cache_dtype": "fp8_e4m3"}), ("bfloat16", {"kv_cache_dtype": "fp8_e4m3"})]


def test_fp8_speedup_is_against_the_plain_run_of_the_same_dtype(bench):
    def run(dtype, tokens, **kw):
        return {"system": "radixlm", "dtype": dtype, "workload": "requests", "output_tokens": tokens, "wall_s": 2.0,
                "forward_s": 1.0, **kw}

    runs = [run("float32", 100), run("bfloat16", 200), run("bfloat16", 300, quantization="fp8",
                                                             kv_cache_dtype="fp8_e4m3")]
    bench.summarize(runs)
    assert runs[2]["fp8_speedup"] == pytest.approx(1.5) and runs[2]["fp8_target"] == bench.FP8_TARGET == 1.4
    assert "fp8_speedup" not in runs[0] and "fp8_speedup" not in runs[1]
