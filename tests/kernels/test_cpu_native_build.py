"""The native kernel cache: its build key follows the CPU, and a kernel library that fails to build
or load leaves the torch reference in charge with one log line (oracle: torch_ref and plain torch)."""

import logging
import os
import shutil
import stat

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels import cpu_native, dispatch, torch_ref
from radixlm.runtime.models import layer_ops

AVX2_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma bmi1 bmi2 f16c"
AMX_FLAGS = AVX2_FLAGS + " avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16 amx_int8"


def _key(features, target="-march=native", version="cc 12.2.0", flags=None, sources=b"int x;"):
    return cpu_native.build_key(sources, flags or ["-O3", "-march=native"], version, target, features)


def test_build_key_follows_cpu_features_target_compiler_and_flags():
    avx2, amx = AVX2_FLAGS.split(), AMX_FLAGS.split()
    assert _key(avx2) != _key(amx)
    assert _key(avx2) == _key(list(reversed(avx2)))  # order of the flags line does not matter
    assert _key(amx, target="-march=znver3 -mavx2") != _key(amx, target="-march=sapphirerapids -mamx-tile")
    assert _key(amx, version="cc 12.2.0") != _key(amx, version="cc 13.1.0")
    assert _key(amx, flags=["-O3"]) != _key(amx, flags=["-O2"])
    assert _key(amx, sources=b"int x;") != _key(amx, sources=b"int y;")


def test_cpu_features_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {AMX_FLAGS}\n\nprocessor\t: 1\n"
                    f"flags\t\t: {AMX_FLAGS}\n")
    assert cpu_native.cpu_features(str(info)) == sorted(set(AMX_FLAGS.split()))
    assert cpu_native.cpu_features(str(tmp_path / "missing")) == []


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_native_target_names_this_cpus_isa():
    target = cpu_native.native_target("cc")
    assert "-march=" in target or "-target-cpu" in target
    features = set(cpu_native.cpu_features())
    if "avx2" in features and "-march=" in target:  # gcc spells each enabled ISA extension
        assert "-mavx2" in target.split()
    if "avx512f" in features and "-march=" in target:
        assert "-mavx512f" in target.split()


@pytest.fixture
def fresh_native(monkeypatch, tmp_path):
    """cpu_native as if never loaded, with its cache in tmp_path; restored afterwards."""
    monkeypatch.setattr(cpu_native, "_lib", None)
    monkeypatch.setattr(cpu_native, "_error", None)
    monkeypatch.setenv("RADIXLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RADIXLM_DISABLE_NATIVE_KERNELS", raising=False)
    return tmp_path


def _failing_compiler(folder) -> str:
    path = folder / "broken-cc"
    path.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "broken-cc 1.0"; exit 0; fi\n'
                    'echo "broken-cc: internal compiler error" >&2\nexit 1\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _assert_torch_fallback(caplog, reason_part):
    for _ in range(3):
        assert not cpu_native.available()
    assert reason_part in cpu_native.unavailable_reason()
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 64, generator=g), torch.randn(64, generator=g)
    want = F.rms_norm(x, (64,), eps=1e-5) * w
    assert torch.equal(layer_ops.rms_norm(x, w, 1e-5), want)
    gate_up = torch.randn(5, 128, generator=g)
    assert torch.equal(layer_ops.silu_mul(gate_up), F.silu(gate_up[:, :64]) * gate_up[:, 64:])
    ops = dispatch.get_attention_ops("auto", "cpu")
    assert ops.name == "torch"
    k, v = torch.randn(64, 2, 16, generator=g), torch.randn(64, 2, 16, generator=g)
    table = torch.arange(64, dtype=torch.int32).reshape(2, 32)
    q, rows, lens = torch.randn(2, 4, 16, generator=g), torch.tensor([1, 0]), torch.tensor([7, 30])
    assert torch.equal(ops.decode_attention(q, k, v, table, rows, lens, 0.25),
                       torch_ref.decode_attention(q, k, v, table, rows, lens, 0.25))
    lines = [r for r in caplog.records if r.name == cpu_native.__name__ and r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "torch reference" in lines[0].getMessage()


def test_failed_build_falls_back_to_torch_with_one_log_line(fresh_native, monkeypatch, caplog):
    monkeypatch.setenv("CC", _failing_compiler(fresh_native))
    caplog.set_level(logging.WARNING)
    _assert_torch_fallback(caplog, "internal compiler error")
    assert not list((fresh_native / "cache" / "kernels").glob("*.so"))  # nothing half-built published


def _target_path(cc: str):
    # the same path _build computes, so a planted file is the one the loader opens
    version = os.popen(f"{cc} --version").read()
    sources = b"".join(p.read_bytes() for p in cpu_native._SOURCES + cpu_native._HEADERS)
    key = cpu_native.build_key(sources, cpu_native._FLAGS, version, cpu_native.native_target(cc),
                               cpu_native.cpu_features())
    return cpu_native.cache_dir() / f"radixlm_cpu-{key}.so"


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_corrupt_cached_library_falls_back_with_one_log_line(fresh_native, monkeypatch, caplog):
    monkeypatch.setenv("CC", "cc")
    target = _target_path("cc")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\x7fELF but not really a shared object")
    caplog.set_level(logging.WARNING)
    _assert_torch_fallback(caplog, str(target.name))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_library_missing_a_kernel_falls_back_with_one_log_line(fresh_native, monkeypatch, caplog):
    monkeypatch.setenv("CC", "cc")
    target = _target_path("cc")
    target.parent.mkdir(parents=True)
    empty = fresh_native / "empty.c"
    empty.write_text("int radixlm_unrelated(void) { return 0; }\n")
    assert os.system(f"cc -shared -fPIC {empty} -o {target}") == 0
    caplog.set_level(logging.WARNING)
    _assert_torch_fallback(caplog, "radixlm_decode_attention")


def test_loading_the_kernels_keeps_subnormals_in_the_process():
    """The library must not set flush-to-zero in its user's process (as -ffast-math's crtfastmath.o did)."""
    import subprocess
    import sys

    code = ("from radixlm.kernels import cpu_native\n"
            "assert cpu_native.available(), cpu_native.unavailable_reason()\n"
            "print(5e-324 * 1.5)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) > 0.0, "subnormals are flushed to zero after loading the kernels"
