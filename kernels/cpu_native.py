"""Native CPU decode attention: C source in csrc/, built once with the system C compiler.

The torch reference gathers every request's K/V rows into a padded copy per layer before
attending, which on a CPU costs more than the attention itself.  The C kernel reads the rows in
place through the block table.  It is built on first use into ~/.cache/radixlm/kernels (keyed by
the source, the flags and the compiler) and loaded with ctypes; `available()` is False, with the
reason logged once, when no compiler works, and callers then keep the torch reference.
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

_SOURCE = Path(__file__).parent / "csrc" / "cpu_decode_attention.c"
_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-shared", "-fopenmp"]
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


def _build(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256(_SOURCE.read_bytes() + " ".join(_FLAGS).encode() + version.encode()).hexdigest()[:16]
    target = cache_dir() / f"cpu_decode_attention-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *_FLAGS, str(_SOURCE), "-o", tmp, "-lm"], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{cc} failed: {proc.stderr.strip()[-500:]}")
        os.replace(tmp, target)  # atomic: concurrent builders each publish a complete file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    logger.info("built the native CPU decode kernel in %.1f s", time.perf_counter() - start)
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
            fn = lib.radixlm_decode_attention
            fn.restype = ctypes.c_int
            p, i32, i64, f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
            fn.argtypes = [p, p, p, i32, p, i64, p, p, i32, i32, i32, i32, f32, p, i32]
            _lib = lib
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _error = str(exc)
    if _error is not None:
        logger.warning("native CPU attention kernel unavailable (%s); using the torch reference", _error)
    return _lib


def available() -> bool:
    return _load() is not None


def unavailable_reason() -> Optional[str]:
    _load()
    return _error


def decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale, out=None):
    """Same contract as torch_ref.decode_attention, for CPU tensors: k/v buffers float32 or bfloat16."""
    lib = _load()
    if lib is None:
        raise RuntimeError(f"native CPU attention kernel unavailable: {_error}")
    bsz, num_q_heads, head_dim = q.shape
    num_kv_heads = k_buffer.shape[1]
    if k_buffer.dtype not in (torch.float32, torch.bfloat16) or v_buffer.dtype != k_buffer.dtype:
        raise TypeError(f"native decode attention takes float32 or bfloat16 KV, got {k_buffer.dtype}")
    if not (k_buffer.is_contiguous() and v_buffer.is_contiguous() and req_to_token.is_contiguous()):
        raise ValueError("native decode attention needs contiguous KV buffers and block table")
    if req_to_token.dtype != torch.int32:
        raise TypeError(f"req_to_token must be int32, got {req_to_token.dtype}")
    qf = q.to(torch.float32).contiguous()                          # [B, Hq, D]
    rows = req_pool_indices.to(torch.int64).contiguous()           # [B]
    lens = seq_lens.to(torch.int64).contiguous()                   # [B]
    result = torch.empty((bsz, num_q_heads, head_dim), dtype=torch.float32)  # [B, Hq, D]
    status = lib.radixlm_decode_attention(
        qf.data_ptr(), k_buffer.data_ptr(), v_buffer.data_ptr(), int(k_buffer.dtype == torch.bfloat16),
        req_to_token.data_ptr(), req_to_token.stride(0), rows.data_ptr(), lens.data_ptr(), bsz, num_q_heads,
        num_kv_heads, head_dim, float(sm_scale), result.data_ptr(), torch.get_num_threads())
    if status != 0:
        raise MemoryError("native decode attention could not allocate its buffers")
    result = result.to(q.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out
