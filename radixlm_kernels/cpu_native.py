"""Native CPU kernels: C sources in csrc/, built once with the system C compiler.

- decode_attention: the torch reference gathers every request's K/V rows into a padded copy per
  layer before attending, which on a CPU costs more than the attention itself; the C kernel reads
  the rows in place through the block table.
- rms_norm, add_rms_norm, rope_, silu_mul (float32 or bfloat16): one pass each where torch takes
  several ops.
- radixlm_decode_step (csrc/cpu_decode_step.c, called by cpu_decode_step.py): a decode step's K/V store
  and attention for one layer in one call.
- linear_rows (csrc/cpu_linear_rows.c): a linear layer for the few rows of a decode step, streaming the dense
  weight; radixlm_decode_layers (csrc/cpu_decode_layers.c, called by runtime/models/native_decode.py): every
  decoder layer of a one- or two-row decode step in one call.
- the kernels that read a packed copy (extend attention on the AMX tile unit and in float32, the AMX linear):
  their wrappers are in cpu_packed.py; their library is this one.
- kv_blocks_copy: the disk tier's block payloads into and out of the KV pool in one call,
  where torch takes one copy per block and layer buffer; checksum64: its files' payload check.

The library is built on first use into ~/.cache/radixlm/kernels and loaded with ctypes. Its file
name is a build key over the sources, the flags, the compiler's version, what `-march=native`
resolves to on this CPU and the CPU's feature flags, so a home folder shared between an AVX2 and an
AMX machine holds one library per machine type and never loads code the CPU cannot run.
(torch.utils.cpp_extension keys its cache by name and sources, not the CPU, and needs C++ and the
Python headers, so it would not do this job.) `available()` is False, with the reason logged in one
line, when no compiler works or the library fails to build or load; callers then keep the torch
reference.
"""

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

logger = logging.getLogger(__name__)

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = [_CSRC / "cpu_decode_attention.c", _CSRC / "cpu_extend_attention.c", _CSRC / "cpu_decode_step.c",
            _CSRC / "cpu_fused_ops.c", _CSRC / "cpu_kv_copy.c", _CSRC / "cpu_linear_rows.c",
            _CSRC / "cpu_decode_layers.c", _CSRC / "cpu_amx_extend.c", _CSRC / "cpu_flash_f32.c",
            _CSRC / "cpu_amx_linear.c", _CSRC / "cpu_shared_keys.c",
            _CSRC / "cpu_amx_decode.c"]
_HEADERS = [_CSRC / "vec8.h", _CSRC / "vec16.h", _CSRC / "attention_rows.h", _CSRC / "extend_blocks.h",
            _CSRC / "amx_tiles.h", _CSRC / "packed_rows.h", _CSRC / "dp_pairs.h",
            _CSRC / "scratch.h", _CSRC / "linear_blocks.h"]
# -ffast-math's code generation, spelled out: -ffast-math (or -funsafe-math-optimizations) at link time
# also links crtfastmath.o, whose constructor sets flush-to-zero in the loading process's FPU state, so
# every float operation of the user's process (numpy, hypothesis, ...) lost its subnormals
_FAST_MATH = ["-fno-math-errno", "-ffinite-math-only", "-fno-signed-zeros", "-fno-trapping-math",
              "-fassociative-math", "-freciprocal-math", "-fno-rounding-math", "-fcx-limited-range"]
# RADIXLM_NATIVE_CFLAGS adds flags (its own build key): "-mno-avx512f" builds the AVX2 paths on an AVX-512 CPU,
# which is how the tests cover both ISAs' code on one machine
_FLAGS = ["-O3", "-march=native", *_FAST_MATH, "-fPIC", "-shared", "-fopenmp",
          *os.environ.get("RADIXLM_NATIVE_CFLAGS", "").split()]
_lib = None
_error: Optional[str] = None


def cache_dir() -> Path:
    root = os.environ.get("RADIXLM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")
    return Path(root) / "kernels"


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The CPU's feature flags (the first `flags` line of /proc/cpuinfo), sorted; [] where unreadable."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags") and ":" in line:
                    return sorted(set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def native_target(cc: str) -> str:
    """What -march=native expands to for this compiler on this CPU: gcc's cc1 line (-march=<cpu>
    and every -m<feature>/-mno-<feature>) or clang's -target-cpu/-target-feature list."""
    proc = subprocess.run([cc, *_FLAGS[:2], "-###", "-E", "-x", "c", os.devnull], capture_output=True, text=True,
                          timeout=30)
    words = (proc.stderr + proc.stdout).replace('"', " ").split()
    kept = [w for prev, w in zip([""] + words, words)
            if w.startswith("-m") or prev in ("-target-cpu", "-target-feature")]
    return " ".join(kept)


def build_key(sources: bytes, flags: list[str], compiler_version: str, target: str,
              features: list[str]) -> str:
    """16 hex digits naming one build: any change of sources, flags, compiler or CPU changes it."""
    parts = [sources, " ".join(flags).encode(), compiler_version.encode(), target.encode(),
             " ".join(sorted(features)).encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _build(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    sources = b"".join(path.read_bytes() for path in _SOURCES + _HEADERS)
    key = build_key(sources, _FLAGS, version, native_target(cc), cpu_features())
    return compile_library(cc, _FLAGS, _SOURCES, cache_dir() / f"radixlm_cpu-{key}.so", "the native CPU kernels")


def compile_library(cc: str, flags: list, sources: list, target: Path, what: str) -> Path:
    """target (a shared library under its build key) compiled from sources unless it is there already."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *flags, *map(str, sources), "-o", tmp, "-lm"], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{cc} failed: {proc.stderr.strip()[-500:]}")
        os.replace(tmp, target)  # atomic: concurrent builders each publish a complete file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    logger.info("built %s in %.1f s", what, time.perf_counter() - start)
    return target


def _load():
    global _lib, _error
    if _lib is not None or _error is not None:
        return _lib
    if os.environ.get("RADIXLM_DISABLE_NATIVE_KERNELS", "").strip() in ("1", "true", "yes"):
        _error = "disabled by RADIXLM_DISABLE_NATIVE_KERNELS"
        return None
    cc = _compiler()
    if cc is None:
        _error = "no C compiler found (set CC, or install gcc)"
    else:
        try:
            lib = ctypes.CDLL(str(_build(cc)))
            p, i32, i64, f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
            signatures = {
                "radixlm_decode_attention": (ctypes.c_int, [p, p, p, i32, p, i64, p, p, i32, i32, i32, i32, f32, p,
                                                            i32]),
                "radixlm_decode_attention_after": (ctypes.c_int, [p, p, p, i32, p, i64, p, p, i32, i32, i32, i32, f32,
                                                                  p, i32, p, p, p]),
                "radixlm_extend_attention": (ctypes.c_int, [p, p, p, i32, p, i64, p, p, p, p, i32, i32, i32, i32,
                                                            f32, p, i32]),
                "radixlm_extend_attention_after": (ctypes.c_int, [p, p, p, i32, p, i64, p, p, p, p, i32, i32, i32,
                                                                  i32, f32, p, i32, p, p, p]),
                "radixlm_amx_extend_available": (ctypes.c_int, [i32]),
                "radixlm_amx_decode_fits": (ctypes.c_int, [i32, i32, i32]),
                "radixlm_amx_extend_attention": (ctypes.c_int, [p, i64, p, p, p, i64, p, p, p, p, i32, i32, i32, i32,
                                                                f32, p, i32]),
                "radixlm_amx_linear_available": (ctypes.c_int, [i64]),
                "radixlm_amx_linear_pack": (None, [p, i64, i64, p, i32]),
                "radixlm_amx_linear": (ctypes.c_int, [p, i64, i32, i64, p, i64, p, p, i64, i32]),
                "radixlm_f32_extend_available": (ctypes.c_int, [i32]),
                "radixlm_f32_extend_attention": (ctypes.c_int, [p, i64, p, p, p, i64, p, p, p, p, i32, i32, i32, i32,
                                                                f32, p, i32]),
                "radixlm_dp_extend_available": (ctypes.c_int, [i32]),
                "radixlm_dp_extend_attention": (ctypes.c_int, [p, i64, p, p, p, i64, p, p, p, p, i32, i32, i32, i32,
                                                               f32, p, i32]),
                "radixlm_bf16_extend_attention": (ctypes.c_int, [p, i64, p, p, p, i64, p, p, p, p, i32, i32, i32, i32,
                                                                 f32, p, i32]),
                "radixlm_shared_keys_attention": (ctypes.c_int, [p, i64, p, p, i32, p, i64, i32, i32, i32, i32, f32,
                                                                 p, p, i32]),
                "radixlm_decode_step": (ctypes.c_int, [p, i64, p, i64, p, i64, p, p, p, i32, p, i64, p, p, i32, i32,
                                                       i32, i32, f32, p, i32, p, p, p]),
                "radixlm_rms_norm": (None, [p, i64, p, p, i64, i32, f32, i32, i32]),
                "radixlm_add_rms_norm": (None, [p, i64, p, p, p, i64, i32, f32, i32, i32]),
                "radixlm_rope": (None, [p, i64, i64, i32, i32, p, p, i32, i32]),
                "radixlm_silu_mul": (None, [p, i64, p, i64, i32, i32, i32]),
                "radixlm_linear_rows": (ctypes.c_int, [p, i64, i32, i32, p, i32, p, p, i64, i32, i32, i32]),
                "radixlm_decode_layers": (ctypes.c_int, [p, i32, p, p, i32, i32, i32, i32, i32, i32, f32, p, p, p,
                                                         p, i64, p, p, f32, i32, i32, p, i64, p]),
                "radixlm_kv_copy": (None, [p, i32, i32, p, i32, p, i64, i32, i32]),
                "radixlm_checksum64": (ctypes.c_uint64, [p, i64]),
            }
            for name, (restype, argtypes) in signatures.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _lib = lib
        except (OSError, AttributeError, RuntimeError, subprocess.SubprocessError) as exc:
            _error = str(exc)
    if _error is not None:
        logger.warning("native CPU kernels unavailable (%s); using the torch reference", _error)
    return _lib


def available() -> bool:
    return _load() is not None


def amx_decode_available(head_dim: int, num_q_heads: int, num_kv_heads: int) -> bool:
    """Whether decode_attention runs bfloat16 KV of this shape on the AMX tile unit (csrc/cpu_amx_decode.c): built for
    a CPU with AMX-BF16, tile state granted, head dim 64, at most 16 query heads; RADIXLM_DISABLE_AMX_DECODE=1 (read
    by the library once a process) keeps the AVX-512 loops."""
    lib = _load()
    return lib is not None and bool(lib.radixlm_amx_decode_fits(int(head_dim), int(num_q_heads), int(num_kv_heads)))


def unavailable_reason() -> Optional[str]:
    _load()
    return _error


def lib():
    """The loaded library (RuntimeError when unavailable)."""
    return _require()


def _require():
    lib = _load()
    if lib is None:
        raise RuntimeError(f"native CPU kernels unavailable: {_error}")
    return lib


def _sink_prior(sinks, n, head_dim):
    """Attention sinks as the kernels' prior (starts, o, lse): a prior of no keys, zero output and log-sum-exp
    sinks[h] is exactly a sink logit in the denominator that takes no value.  -> ([n] zeros, [n, Hq, D] zeros,
    [n, Hq])."""
    num_q_heads = sinks.numel()
    lse = sinks.to(torch.float32).reshape(1, num_q_heads).expand(n, num_q_heads).contiguous()   # [n, Hq]
    return (torch.zeros(n, dtype=torch.int64), torch.zeros((n, num_q_heads, head_dim), dtype=torch.float32), lse)


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale, out=None,
                     shared=None, sinks=None):
    """Same contract as torch_ref.decode_attention, for CPU tensors: k/v buffers float32 or bfloat16.
    shared: a cpu_shared_prefix.SharedPrefix of these requests, attended once for all of them; sinks: [Hq]
    attention-sink logits (torch_ref's), not with shared."""
    rows = req_pool_indices.to(torch.int64).contiguous()           # [B]
    lens = seq_lens.to(torch.int64).contiguous()                   # [B]
    if sinks is not None:
        return _attention(_require().radixlm_decode_attention_after, "decode", q, k_buffer, v_buffer, req_to_token,
                          (rows, lens), rows.numel(), sm_scale, out, after=_sink_prior(sinks, rows.numel(), q.shape[2]))
    if shared is None:
        return _attention(_require().radixlm_decode_attention, "decode", q, k_buffer, v_buffer, req_to_token,
                          (rows, lens), rows.numel(), sm_scale, out)
    prior_o, prior_lse = shared.attend(q, k_buffer, v_buffer, sm_scale)   # [B, Hq, D], [B, Hq]
    return _attention(_require().radixlm_decode_attention_after, "decode", q, k_buffer, v_buffer, req_to_token,
                      (rows, lens), rows.numel(), sm_scale, out, after=(shared.starts, prior_o, prior_lse))


def extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens, sm_scale,
                     out=None, shared=None, sinks=None):
    """Same contract as torch_ref.extend_attention (q [T, Hq, D] -> out [T, Hq, D]), for CPU tensors:
    each tile of 16 new tokens reads its request's cached keys once (cpu_extend_attention.c).
    shared: a cpu_shared_prefix.SharedPrefix of these requests' cached keys, attended once for all new tokens;
    sinks: [Hq] attention-sink logits (torch_ref's), not with shared."""
    rows = req_pool_indices.to(torch.int64).contiguous()           # [B]
    prefix = prefix_lens.to(torch.int64).contiguous()              # [B]
    ext = extend_lens.to(torch.int64).contiguous()                 # [B]
    starts = (torch.cumsum(ext, 0) - ext).contiguous()             # [B]
    if sinks is not None:
        _, zero_o, lse = _sink_prior(sinks, q.shape[0], q.shape[2])               # [T, Hq, D], [T, Hq]
        return _attention(_require().radixlm_extend_attention_after, "extend", q, k_buffer, v_buffer, req_to_token,
                          (rows, prefix, ext, starts), ext.numel(), sm_scale, out,
                          after=(torch.zeros(ext.numel(), dtype=torch.int64), zero_o, lse))   # no keys before [B]
    if shared is None:
        return _attention(_require().radixlm_extend_attention, "extend", q, k_buffer, v_buffer, req_to_token,
                          (rows, prefix, ext, starts), ext.numel(), sm_scale, out)
    prior_o, prior_lse = shared.attend(q, k_buffer, v_buffer, sm_scale)   # [T, Hq, D], [T, Hq]
    return _attention(_require().radixlm_extend_attention_after, "extend", q, k_buffer, v_buffer, req_to_token,
                      (rows, prefix, ext, starts), ext.numel(), sm_scale, out,
                      after=(shared.starts, prior_o, prior_lse))


def _attention(fn, what, q, k_buffer, v_buffer, req_to_token, index_tensors, batch, sm_scale, out, after=()):
    """Call a native attention kernel: q [N, Hq, D] -> [N, Hq, D] in q's dtype (into out when given)."""
    _check_kv(k_buffer, v_buffer, req_to_token)
    n, num_q_heads, head_dim = q.shape
    qf = q.to(torch.float32).contiguous()                          # [N, Hq, D]
    result = torch.empty((n, num_q_heads, head_dim), dtype=torch.float32)  # [N, Hq, D]
    status = fn(qf.data_ptr(), k_buffer.data_ptr(), v_buffer.data_ptr(), int(k_buffer.dtype == torch.bfloat16),
                req_to_token.data_ptr(), req_to_token.stride(0), *(t.data_ptr() for t in index_tensors), batch,
                num_q_heads, k_buffer.shape[1], head_dim, float(sm_scale), result.data_ptr(), torch.get_num_threads(),
                *(t.data_ptr() for t in after))
    if status != 0:
        raise MemoryError(f"native {what} attention could not allocate its buffers")
    result = result.to(q.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out


def _check_kv(k_buffer, v_buffer, req_to_token) -> None:
    if k_buffer.dtype not in (torch.float32, torch.bfloat16) or v_buffer.dtype != k_buffer.dtype:
        raise TypeError(f"native attention takes float32 or bfloat16 KV, got {k_buffer.dtype}")
    if not (k_buffer.is_contiguous() and v_buffer.is_contiguous() and req_to_token.is_contiguous()):
        raise ValueError("native attention needs contiguous KV buffers and block table")
    if req_to_token.dtype != torch.int32:
        raise TypeError(f"req_to_token must be int32, got {req_to_token.dtype}")


FUSED_DTYPES = (torch.float32, torch.bfloat16)


def _as_rows(x: torch.Tensor, what: str) -> torch.Tensor:
    """x as 2-D rows [R, N] with a unit last stride: a view where the leading dims flatten evenly,
    else a contiguous copy."""
    if x.dtype not in FUSED_DTYPES or x.device.type != "cpu":
        raise TypeError(f"{what} must be a float32 or bfloat16 CPU tensor, got {x.dtype} on {x.device}")
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _vector(weight: torch.Tensor, n: int, dtype) -> torch.Tensor:
    if weight.shape != (n,) or weight.dtype != dtype:
        raise ValueError(f"weight must be {dtype} of shape ({n},), got {weight.dtype} {tuple(weight.shape)}")
    return weight.contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., N] (rows may be strided) -> x * rsqrt(mean(x^2) + eps) * weight [N], new contiguous.
    bfloat16 rounds as HF does: normalised in float32, cast, then multiplied by the weight."""
    rows, n = _as_rows(x, "x"), x.shape[-1]
    w = _vector(weight, n, x.dtype)
    out = torch.empty(x.shape, dtype=x.dtype)
    _require().radixlm_rms_norm(rows.data_ptr(), rows.stride(0), w.data_ptr(), out.data_ptr(), rows.shape[0], n,
                                float(eps), _is_bf16(x), torch.get_num_threads())
    return out


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """residual += x (in place; residual contiguous [T, N]); returns rms_norm(residual) as a new tensor."""
    rows, n = _as_rows(x, "x"), x.shape[-1]
    w = _vector(weight, n, x.dtype)
    if not residual.is_contiguous() or residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError("residual must be a contiguous tensor shaped like x, of its dtype")
    out = torch.empty(x.shape, dtype=x.dtype)
    _require().radixlm_add_rms_norm(rows.data_ptr(), rows.stride(0), residual.data_ptr(), w.data_ptr(),
                                    out.data_ptr(), rows.shape[0], n, float(eps), _is_bf16(x),
                                    torch.get_num_threads())
    return out


def rope_(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding in place.  x: [T, heads, D] whose heads are contiguous within a
    row (a slice of the fused qkv output is fine); positions: [T] int64; cos_sin: [C, D] of x's dtype,
    cos in [:, :D/2] and sin in [:, D/2:].  Returns x."""
    if x.dim() != 3 or x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        raise ValueError("rope_ needs x [T, heads, D] with contiguous heads")
    if x.dtype not in FUSED_DTYPES or cos_sin.dtype != x.dtype or not cos_sin.is_contiguous():
        raise TypeError("rope_ takes float32 or bfloat16 x and a contiguous cos_sin cache of the same dtype")
    pos = positions.to(torch.int64).contiguous()
    _require().radixlm_rope(x.data_ptr(), x.stride(0), x.shape[0], x.shape[1], x.shape[2], pos.data_ptr(),
                            cos_sin.data_ptr(), _is_bf16(x), torch.get_num_threads())
    return x


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] -> silu(gate_up[:, :I]) * gate_up[:, I:], new contiguous [T, I]."""
    rows, n = _as_rows(gate_up, "gate_up"), gate_up.shape[-1] // 2
    if gate_up.shape[-1] != 2 * n:
        raise ValueError(f"gate_up's last dim must be even, got {gate_up.shape[-1]}")
    out = torch.empty((*gate_up.shape[:-1], n), dtype=gate_up.dtype)
    _require().radixlm_silu_mul(rows.data_ptr(), rows.stride(0), out.data_ptr(), rows.shape[0], n,
                                _is_bf16(gate_up), torch.get_num_threads())
    return out


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                out_f32: bool = False) -> torch.Tensor:
    """x [M, K] (rows may be strided) @ weight [N, K]^T (+ bias [N]) -> [M, N] in x's dtype (float32 when
    out_f32), streaming the dense weight rows (csrc/cpu_linear_rows.c): for the few rows of a decode step."""
    rows = _as_rows(x, "x")
    m, k = rows.shape
    if weight.dtype != x.dtype or weight.dim() != 2 or weight.shape[1] != k or not weight.is_contiguous():
        raise ValueError(f"weight must be a contiguous {x.dtype} [N, {k}], got {weight.dtype} {tuple(weight.shape)}")
    n = weight.shape[0]
    if bias is not None:
        bias = _vector(bias, n, x.dtype)
    out = torch.empty((m, n), dtype=torch.float32 if out_f32 else x.dtype)
    status = _require().radixlm_linear_rows(rows.data_ptr(), rows.stride(0), m, k, weight.data_ptr(), n,
                                            None if bias is None else bias.data_ptr(), out.data_ptr(), n,
                                            _is_bf16(x), int(out_f32), torch.get_num_threads())
    if status != 0:
        raise MemoryError("native linear could not allocate its buffers")
    return out


def kv_blocks_copy(payloads: list, buffers: list, slots: torch.Tensor, to_pool: bool) -> None:
    """payloads: one contiguous CPU tensor per block, [len(buffers), block, *row] each; buffers: contiguous
    [num_slots, *row] CPU tensors of one dtype (the pool's K and V per layer); slots: int64 [blocks * block].
    to_pool: payload rows into the buffers' rows `slots` (else the buffers' rows into the payloads)."""
    row_bytes = buffers[0][0].numel() * buffers[0].element_size()
    block = slots.numel() // len(payloads)
    if any(not b.is_contiguous() or b[0].numel() * b.element_size() != row_bytes for b in buffers):
        raise ValueError("KV buffers must be contiguous with rows of one size")
    if any(not p.is_contiguous() or p.numel() * p.element_size() != len(buffers) * block * row_bytes for p in payloads):
        raise ValueError("each payload must be contiguous and hold every buffer's rows of one block")
    ptrs = lambda ts: (ctypes.c_void_p * len(ts))(*[t.data_ptr() for t in ts])  # noqa: E731
    slots = slots.to(torch.int64).contiguous()
    _require().radixlm_kv_copy(ptrs(payloads), len(payloads), block, ptrs(buffers), len(buffers), slots.data_ptr(),
                               row_bytes, int(to_pool), torch.get_num_threads())


def checksum64(data) -> int:
    """radix_cache.disk_store.checksum64_reference of a bytes-like object, at memory speed (the GIL is
    released meanwhile, so loader threads check files in parallel)."""
    view = memoryview(data).cast("B")
    if view.nbytes == 0:
        return _require().radixlm_checksum64(None, 0)
    buf = view if not view.readonly else memoryview(bytearray(view))
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    return _require().radixlm_checksum64(ptr, view.nbytes)


def _is_bf16(x: torch.Tensor) -> int:
    return int(x.dtype == torch.bfloat16)
