"""Linear layers over GGUF block-quantized weights on CPUs (csrc/cpu_quant_linear.c), and their float reference.

Weights stay in their GGUF block format (uint8 rows [N, row_bytes]); a product quantizes the activations per
block of 32 to int8 (llama.cpp's Q8 activations) and takes integer dot products per block.  The one C source is
built once per ISA into its own library (cached beside the other native kernels, keyed like them):

  vnni    AVX512-VNNI (vpdpbusd)        where the CPU has avx512_vnni, avx512vl and avx512bw
  avx2    AVX2 (vpmaddubsw + vpmaddwd)  every x86-64 CPU with avx2 and fma
  scalar  no vector ISA                 every CPU with a C compiler
  torch   the weights dequantized per call and F.linear (no compiler; float activations)

best_isa() is the first of those this process can run; RADIXLM_QUANT_ISA forces one (tests force each).
dequantize(...) (the gguf package's own dequantizer) is the float reference every kernel is tested against.

layer_linear (csrc/cpu_quant_layer.c) serves the models: integer dot products for a few rows, and from DENSE_ROWS
rows on tiles of 16 weight rows, which cost the unpacking once for all rows: int8 tiles in the vnni build (the rows
as signed bytes with per-sub-block scales against the same Q8 activation blocks, set_int8_tiles), dense tiles
elsewhere (weight rows dequantized a few at a time, dequantize_native, then the dense row kernels of
csrc/linear_blocks.h).
"""

import ctypes
import logging
import os
import subprocess
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import cpu_native

logger = logging.getLogger(__name__)

_CSRC = Path(__file__).parent / "csrc"
_SOURCES = [_CSRC / "cpu_quant_linear.c", _CSRC / "cpu_quant_layer.c"]
_HEADERS = [_CSRC / "linear_blocks.h", _CSRC / "vec8.h", _CSRC / "vec16.h"]
# name -> (code in the C source, elements per block, bytes per block)
FORMATS = {"Q8_0": (0, 32, 34), "Q4_0": (1, 32, 18), "Q4_1": (2, 32, 20), "Q5_0": (5, 32, 22),
           "Q4_K": (3, 256, 144), "Q6_K": (4, 256, 210)}
ISAS = ("vnni", "avx2", "scalar", "torch")
NATIVE_ISAS = ISAS[:3]   # the ones built from C
_ISA_FLAGS = {"vnni": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"],
              "avx2": ["-mavx2", "-mfma", "-mf16c"],
              "scalar": ["-march=x86-64", "-mno-avx"] if os.uname().machine in ("x86_64", "AMD64") else []}
_ISA_CPU = {"vnni": ("avx512_vnni", "avx512vl", "avx512bw", "avx2"), "avx2": ("avx2", "fma"), "scalar": ()}
_ISA_CODE = {"vnni": 2, "avx2": 1, "scalar": 0}
_libs: dict = {}
SERIAL_MACS = 1 << 24


def isa_supported(isa: str) -> Optional[str]:
    """None when this process can run `isa`, else why not (one line)."""
    if isa == "torch":
        return None
    if isa not in _ISA_FLAGS:
        return f"unknown ISA {isa!r} (one of {', '.join(ISAS)})"
    if isa != "scalar" and os.uname().machine not in ("x86_64", "AMD64"):
        return f"{isa} needs an x86-64 CPU"
    missing = [f for f in _ISA_CPU[isa] if f not in cpu_native.cpu_features()]
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    return _library(isa)[1]


def best_isa() -> str:
    """$RADIXLM_QUANT_ISA when set (ValueError when this CPU cannot run it), else the fastest ISA available."""
    forced = os.environ.get("RADIXLM_QUANT_ISA", "").strip()
    if forced:
        reason = isa_supported(forced)
        if reason:
            raise ValueError(f"RADIXLM_QUANT_ISA={forced}: {reason}")
        return forced
    return next(isa for isa in ISAS if isa_supported(isa) is None)


def _library(isa: str):
    """(ctypes library or None, why not) for one ISA, built on first use."""
    if isa in _libs:
        return _libs[isa]
    cc = cpu_native._compiler()
    if cc is None:
        _libs[isa] = (None, "no C compiler found (set CC, or install gcc)")
        return _libs[isa]
    try:
        lib = ctypes.CDLL(str(_build(cc, isa)))
        p, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        lib.radixlm_quant_isa.restype, lib.radixlm_quant_isa.argtypes = i32, []
        lib.radixlm_quant_act_block_bytes.restype, lib.radixlm_quant_act_block_bytes.argtypes = i64, []
        lib.radixlm_quantize_q8.restype, lib.radixlm_quantize_q8.argtypes = None, [p, i64, i32, i64, p, i32]
        lib.radixlm_quant_linear.restype = i32
        lib.radixlm_quant_linear.argtypes = [i32, p, i32, i64, p, i64, i64, p, i64, i32]
        lib.radixlm_quant_layer_linear.restype = i32
        lib.radixlm_quant_layer_linear.argtypes = [p, p, i64, i32, i32, p, p, i64, i32, i32]
        lib.radixlm_quant_dequant_rows.restype = i32
        lib.radixlm_quant_dequant_rows.argtypes = [i32, p, i64, i64, i64, i64, p, i32]
        lib.radixlm_quant_dequantize.restype = i32
        lib.radixlm_quant_dequantize.argtypes = [i32, p, i64, i64, i64, p, i32, i32]
        lib.radixlm_quant_set_dense_rows.restype, lib.radixlm_quant_set_dense_rows.argtypes = None, [i32]
        lib.radixlm_quant_dense_rows.restype, lib.radixlm_quant_dense_rows.argtypes = i32, []
        lib.radixlm_quant_set_int8_tiles.restype, lib.radixlm_quant_set_int8_tiles.argtypes = None, [i32]
        lib.radixlm_quant_int8_tiles.restype, lib.radixlm_quant_int8_tiles.argtypes = i32, []
        if lib.radixlm_quant_isa() != _ISA_CODE[isa]:
            raise RuntimeError(f"the {isa} build compiled another path ({lib.radixlm_quant_isa()})")
        lib.radixlm_quant_set_dense_rows(_dense_rows_setting(isa))
        lib.radixlm_quant_set_int8_tiles(_int8_tiles_setting())
        _libs[isa] = (lib, None)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _libs[isa] = (None, f"the {isa} build failed: {exc}")
    return _libs[isa]


def _build(cc: str, isa: str) -> Path:
    flags = ["-O3", *_ISA_FLAGS[isa], "-fPIC", "-shared", "-fopenmp"]
    if isa == "vnni" and "avx512_bf16" in cpu_native.cpu_features():
        flags.append("-mavx512bf16")   # the dense tiles' bfloat16 pair dot product
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    sources = b"".join(path.read_bytes() for path in _SOURCES + _HEADERS)
    key = cpu_native.build_key(sources, flags, version, isa, cpu_native.cpu_features())
    return cpu_native.compile_library(cc, flags, _SOURCES, cpu_native.cache_dir() / f"radixlm_quant_{isa}-{key}.so",
                                      f"the {isa} quantized linear kernels")


def row_bytes(fmt: str, k: int) -> int:
    """Bytes of one row of k weights in `fmt` (ValueError when k is not a whole number of its blocks)."""
    _, block, size = FORMATS[fmt]
    if k % block:
        raise ValueError(f"{fmt} rows hold whole blocks of {block}; {k} columns do not")
    return k // block * size


def dequantize(weight: torch.Tensor, fmt: str, k: int) -> torch.Tensor:
    """uint8 [N, row_bytes] in `fmt` -> float32 [N, k], by the gguf package's dequantizer (the reference)."""
    from gguf import GGMLQuantizationType, quants

    data = weight.contiguous().numpy()                                       # [N, row_bytes] uint8
    out = quants.dequantize(data, GGMLQuantizationType[fmt])                # [N, k] float32
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).reshape(weight.shape[0], k)


def dequantize_native(weight: torch.Tensor, fmt: str, k: int, isa: str, dtype: torch.dtype = torch.float32,
                      out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """dequantize(...) by `isa`'s C dequantizer, the one the dense tiles use -> [N, k] float32, or bfloat16 rounded
    to nearest even from those values; out: a contiguous [N, k] tensor of that dtype to write into."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dequantizes to float32 or bfloat16, not {dtype}")
    w = weight.contiguous()
    if out is None:
        out = torch.empty((w.shape[0], k), dtype=dtype)                     # [N, k]
    elif out.dtype != dtype or out.shape != (w.shape[0], k) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {dtype} [{w.shape[0]}, {k}]")
    if _require(isa).radixlm_quant_dequantize(FORMATS[fmt][0], w.data_ptr(), w.shape[1], k, w.shape[0], out.data_ptr(),
                                              int(dtype == torch.bfloat16), torch.get_num_threads()) != 0:
        raise ValueError(f"no kernel for {fmt}")
    return out


# From this many input rows on, layer_linear (and the native decode call) multiplies dense tiles: a few weight rows
# at a time dequantized to the model's dtype, then the dense row kernels; below it, integer dot products with the
# activations quantized to Q8.  Where the two cross, one 3072 x 576 layer on one thread (AMD EPYC Zen 4): 8 rows
# with AVX-512 (bf16 pair dot products; 32 rows: 1.0 ms against 2.0), 16-24 rows for the AVX2 build's float32 FMA.
# RADIXLM_QUANT_DENSE_ROWS sets it for every ISA (0: never).
DENSE_ROWS = {"vnni": 8, "avx2": 24, "scalar": 0}


def _dense_rows_setting(isa: str) -> int:
    """$RADIXLM_QUANT_DENSE_ROWS when set (ValueError unless a whole number >= 0), else DENSE_ROWS[isa]."""
    value = os.environ.get("RADIXLM_QUANT_DENSE_ROWS", "").strip()
    if not value:
        return DENSE_ROWS[isa]
    if not value.isdigit():
        raise ValueError(f"RADIXLM_QUANT_DENSE_ROWS={value!r}: a whole number of rows (0: never dense tiles)")
    return int(value)


def set_dense_rows(isa: str, rows: int) -> None:
    """layer_linear takes dense tiles from `rows` input rows on in `isa`'s library (0: never)."""
    _require(isa).radixlm_quant_set_dense_rows(rows)


def dense_rows(isa: str) -> int:
    return _require(isa).radixlm_quant_dense_rows()


def _int8_tiles_setting() -> int:
    """$RADIXLM_QUANT_INT8_TILES when set (1 or 0; ValueError otherwise), else 1."""
    value = os.environ.get("RADIXLM_QUANT_INT8_TILES", "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"RADIXLM_QUANT_INT8_TILES={value!r}: 1 (int8 tiles where built) or 0 (dense tiles)")
    return int(value or 1)


def set_int8_tiles(isa: str, on: bool) -> None:
    """Whether layer_linear's tiles (from dense_rows on) are int8 ones, where `isa`'s library has them (vnni)."""
    _require(isa).radixlm_quant_set_int8_tiles(int(bool(on)))


def int8_tiles(isa: str) -> bool:
    """True when layer_linear's many-row products take int8 tiles in `isa`'s library."""
    return bool(_require(isa).radixlm_quant_int8_tiles())


def quantize_activations(x: torch.Tensor, isa: str) -> torch.Tensor:
    """x [M, K] float32 (K a multiple of 32) -> its Q8 blocks, opaque bytes [M, K / 32 * block]."""
    lib = _require(isa)
    rows = x.contiguous() if x.stride(-1) != 1 else x
    m, k = rows.shape
    out = torch.empty((m, k // 32 * lib.radixlm_quant_act_block_bytes()), dtype=torch.uint8)  # [M, blocks]
    lib.radixlm_quantize_q8(rows.data_ptr(), rows.stride(0), m, k, out.data_ptr(), torch.get_num_threads())
    return out


def quant_linear(x: torch.Tensor, weight: torch.Tensor, fmt: str, isa: str,
                 xq: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [M, K] float32 @ weight^T -> float32 [M, N]; weight uint8 [N, row_bytes(fmt, K)] in GGUF block format.
    xq: x's Q8 blocks when already quantized (one quantization serves every weight that reads x); out: a float32
    [M, N] view whose rows may be strided (a column slice of a wider output)."""
    m, k = x.shape
    n = weight.shape[0]
    if weight.dtype != torch.uint8 or weight.dim() != 2 or weight.shape[1] != row_bytes(fmt, k):
        raise ValueError(f"{fmt} weight for K={k} must be uint8 [N, {row_bytes(fmt, k)}], got "
                         f"{weight.dtype} {tuple(weight.shape)}")
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32)                      # [M, N]
    if isa == "torch":
        out.copy_(F.linear(x.float(), dequantize(weight, fmt, k)))
        return out
    if out.stride(-1) != 1 or out.dtype != torch.float32:
        raise ValueError("out must be float32 with contiguous rows")
    if xq is None:
        xq = quantize_activations(x.float(), isa)
    # a product under SERIAL_MACS runs on one thread: on a loaded host each parallel region can wait a scheduler
    # slice for its second thread (SmolLM2 decode step, batch 1, 2 cores under load: 149 ms on 2 threads, 47 on 1)
    threads = 1 if m * n * k < SERIAL_MACS else torch.get_num_threads()
    status = _require(isa).radixlm_quant_linear(FORMATS[fmt][0], xq.data_ptr(), m, k, weight.contiguous().data_ptr(),
                                                n, weight.shape[1], out.data_ptr(), out.stride(0), threads)
    if status != 0:
        raise ValueError(f"no kernel for {fmt}")
    return out


def _require(isa: str):
    lib, reason = _library(isa) if isa in _ISA_FLAGS else (None, f"no native library for {isa!r}")
    if lib is None:
        raise RuntimeError(f"quantized kernels ({isa}) unavailable: {reason}")
    return lib


MAX_LAYER_PARTS = 3


class _LayerPart(ctypes.Structure):
    _fields_ = [("fmt", ctypes.c_int32), ("pad", ctypes.c_int32), ("w", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("row_bytes", ctypes.c_int64)]


class LayerLinear(ctypes.Structure):
    """csrc/cpu_quant_layer.c's QuantLinear: a weight of up to MAX_LAYER_PARTS parts of GGUF blocks stacked along N,
    as the native decode call reads it (layer_linear_weights builds it and keeps its tensors alive)."""
    _fields_ = [("num_parts", ctypes.c_int32), ("pad", ctypes.c_int32), ("parts", _LayerPart * MAX_LAYER_PARTS)]


def layer_linear_weights(parts: list) -> LayerLinear:
    """parts: [(fmt, uint8 [n, row_bytes])] (each a FORMATS name) -> the descriptor; ValueError for more parts than
    it holds or a format without a kernel."""
    if not 0 < len(parts) <= MAX_LAYER_PARTS or any(fmt not in FORMATS for fmt, _ in parts):
        raise ValueError(f"a layer linear takes 1 to {MAX_LAYER_PARTS} parts in {', '.join(FORMATS)}, got "
                         f"{[fmt for fmt, _ in parts]}")
    desc = LayerLinear(num_parts=len(parts))
    desc.tensors = [w.contiguous() for _, w in parts]   # what the pointers point into
    for slot, (fmt, _), w in zip(desc.parts, parts, desc.tensors):
        slot.fmt, slot.w, slot.n, slot.row_bytes = FORMATS[fmt][0], w.data_ptr(), w.shape[0], w.shape[1]
    return desc


def layer_linear_fn(isa: str) -> int:
    """Address of `isa`'s radixlm_quant_layer_linear, for the native decode call's LayerWeights.quant_linear."""
    return ctypes.cast(_require(isa).radixlm_quant_layer_linear, ctypes.c_void_p).value


def layer_linear(x: torch.Tensor, desc: LayerLinear, k: int, isa: str, bias: Optional[torch.Tensor] = None,
                 threads: Optional[int] = None) -> torch.Tensor:
    """x [M, K] float32 or bfloat16 @ desc^T (+ bias [N]) -> [M, N] in x's dtype, as the native decode call's linear
    layers compute it (csrc/cpu_quant_layer.c)."""
    n = sum(desc.parts[i].n for i in range(desc.num_parts))
    if x.dtype not in (torch.float32, torch.bfloat16) or x.dim() != 2 or x.shape[1] != k or k % 32:
        raise ValueError(f"x must be float32 or bfloat16 [M, {k}], K a multiple of 32")
    x = x.contiguous()
    out = torch.empty((x.shape[0], n), dtype=x.dtype)                        # [M, N]
    b = None if bias is None else bias.to(x.dtype).contiguous()
    status = _require(isa).radixlm_quant_layer_linear(
        ctypes.addressof(desc), x.data_ptr(), x.stride(0), x.shape[0], k, None if b is None else b.data_ptr(),
        out.data_ptr(), out.stride(0), int(x.dtype == torch.bfloat16), threads or torch.get_num_threads())
    if status != 0:
        raise MemoryError("the quantized layer linear could not allocate its buffers")
    return out
