"""Copies of KV blocks between the KV pool and plain bytes, for the disk tier, and the identity of a KV
layout (what must match before one server may read another's blocks)."""

import hashlib
import os
import warnings
from pathlib import Path

import torch

from radixlm.kernels import cpu_native

_SAMPLES = 64          # chunks of each weight file hashed into its fingerprint
_SAMPLE_BYTES = 1 << 16


def payload_checksum():
    """The disk tier's payload checksum: the native checksum64 where the kernels load, else None (crc32)."""
    return cpu_native.checksum64 if cpu_native.available() else None


def read_blocks(pool, slots: list, block_size: int, pinned: bool = False) -> list:
    """KV of `slots` (a whole number of blocks) as one contiguous CPU tensor per block, each
    [2 * layers, block_size, kv_heads, head_dim] (K of every layer, then V) in the pool's dtype,
    viewed as bytes.  pinned (the host tier, on CUDA): into page-locked memory, copied on a side stream
    after the work queued so far; returns once the copies are done, so the slots may be reused.

    On a device: every block gathered in one launch into one staging tensor, then one copy per block to
    its own host buffer (a block kept alone, in the host tier or the disk writer, holds only its bytes)."""
    device = pool.k_buffers[0].device
    bufs = (*pool.k_buffers, *pool.v_buffers)
    if device.type == "cpu" and cpu_native.available():
        # one allocation per block: a block kept alone (host tier, disk writer) holds only its own bytes
        out = [torch.empty((len(bufs), block_size, pool.num_kv_heads, pool.head_dim), dtype=pool.dtype,
                           device=device) for _ in range(len(slots) // block_size)]   # [2L, B, H, D] each
        cpu_native.kv_blocks_copy(out, list(bufs), torch.tensor(slots, dtype=torch.long, device=device),
                                  to_pool=False)
        return [block.view(torch.uint8).numpy() for block in out]
    if device.type != "cuda":
        return _read_blocks_torch(bufs, slots, block_size)
    pinned = bool(pinned)
    stream = _side_stream(device) if pinned else torch.cuda.current_stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        staged = gather_blocks(pool, slots, block_size)   # [n, 2L, B, H, D]
        hosts = [torch.empty(block.shape, dtype=block.dtype, pin_memory=pinned) for block in staged]  # [2L, B, H, D]
        for host, block in zip(hosts, staged):
            host.copy_(block, non_blocking=pinned)
    stream.synchronize()
    return [h.view(torch.uint8).numpy() for h in hosts]


def _read_blocks_torch(bufs, slots, block_size):
    """The plain torch copy, block by block: CPUs without the native kernels (and the layout's oracle)."""
    out = []
    for i in range(0, len(slots), block_size):
        idx = torch.tensor(slots[i:i + block_size], dtype=torch.long, device=bufs[0].device)   # [B]
        block = torch.stack([buf.index_select(0, idx) for buf in bufs])   # [2L, B, H, D]
        out.append(block.cpu().view(torch.uint8).numpy())
    return out


def _slot_tensor(slots, device):
    """[len(slots)] int64 on the device, from a pinned host copy (no pageable sync)."""
    host = torch.tensor(slots, dtype=torch.long)   # [N]
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def _use_triton(device) -> bool:
    if device.type == "cuda":
        return _triton_copy() is not None
    return os.environ.get("TRITON_INTERPRET", "") == "1" and _triton_copy() is not None


_TRITON_COPY: list = []


def _triton_copy():
    """radixlm_kernels.triton_kv_blocks, or None where triton does not import."""
    if not _TRITON_COPY:
        try:
            from radixlm.kernels import triton_kv_blocks
        except ImportError:
            triton_kv_blocks = None
        _TRITON_COPY.append(triton_kv_blocks)
    return _TRITON_COPY[0]


def gather_blocks(pool, slots: list, block_size: int) -> torch.Tensor:
    """The pool's rows `slots` as one [blocks, 2L, block_size, H, D] tensor on the pool's device (block b:
    K of every layer, then V, each [block_size, H, D]: read_blocks' payload layout), in one launch where
    triton imports (else one index_select per buffer)."""
    bufs = (*pool.k_buffers, *pool.v_buffers)
    device = bufs[0].device
    n = len(slots) // block_size
    staged = torch.empty((n, len(bufs), block_size, pool.num_kv_heads, pool.head_dim), dtype=pool.dtype,
                         device=device)   # [n, 2L, B, H, D]
    idx = _slot_tensor(slots, device)   # [n * B]
    if _use_triton(device):
        _triton_copy().kv_blocks_copy(staged, bufs, idx, block_size, to_pool=False)
    else:
        for i, buf in enumerate(bufs):
            staged[:, i] = buf.index_select(0, idx).view(n, block_size, pool.num_kv_heads, pool.head_dim)
    return staged


def scatter_blocks(pool, slots: list, staged: torch.Tensor) -> None:
    """Inverse of gather_blocks: staged [blocks, 2L, block, H, D] on the pool's device into rows `slots`."""
    bufs = (*pool.k_buffers, *pool.v_buffers)
    n, block = staged.shape[0], staged.shape[2]
    idx = _slot_tensor(slots, bufs[0].device)   # [n * B]
    if _use_triton(bufs[0].device):
        _triton_copy().kv_blocks_copy(staged, bufs, idx, block, to_pool=True)
    else:
        for i, buf in enumerate(bufs):
            buf.index_copy_(0, idx, staged[:, i].reshape(n * block, pool.num_kv_heads, pool.head_dim))


_SIDE_STREAMS: dict = {}


def _side_stream(device):
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


_STAGING: dict = {}


def _pinned_staging(nbytes: int) -> torch.Tensor:
    """A page-locked [nbytes] uint8 buffer, reused across calls (grown when too small); only the
    scheduler thread calls write_blocks, which synchronises before returning."""
    buf = _STAGING.get("host")
    if buf is None or buf.numel() < nbytes:
        buf = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)   # [capacity]
        _STAGING["host"] = buf
    return buf[:nbytes]


def _host_views(payloads):
    """Each payload as a [nbytes] uint8 CPU tensor over its memory (no copy)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # read-only bytes from the disk tier: only read
        return [torch.frombuffer(p, dtype=torch.uint8) for p in payloads]


def write_blocks(pool, slots: list, payloads: list) -> None:
    """Inverse of read_blocks: payloads (bytes-like, one per block) into `slots`.  ValueError, writing
    nothing, when a payload's size does not fit this pool's layout.

    On CUDA: page-locked payloads (the host tier's) go straight to one device staging tensor, one async
    copy per block; others are packed into one page-locked staging buffer and copied
    once; then one launch scatters every layer's rows into the pool."""
    bufs = (*pool.k_buffers, *pool.v_buffers)
    per_token = len(bufs) * pool.num_kv_heads * pool.head_dim * pool.dtype.itemsize
    if len(slots) % len(payloads):
        raise ValueError(f"{len(slots)} slots do not split into {len(payloads)} blocks")
    block = len(slots) // len(payloads)
    for p in payloads:
        if memoryview(p).nbytes != block * per_token:
            raise ValueError(f"a KV block of {memoryview(p).nbytes} bytes does not fit {block} tokens of this pool")
    device = bufs[0].device
    if device.type == "cpu" and cpu_native.available():
        cpu_native.kv_blocks_copy([torch.frombuffer(p, dtype=torch.uint8) for p in payloads], list(bufs),
                                  torch.tensor(slots, dtype=torch.long, device=device), to_pool=True)
        return
    views = _host_views(payloads)   # [block * per_token] each
    n, nbytes = len(payloads), block * per_token
    shape = (n, len(bufs), block, pool.num_kv_heads, pool.head_dim)
    staged = torch.empty(n * nbytes, dtype=torch.uint8, device=device)   # [n * bytes per block]
    if device.type != "cuda":
        torch.cat(views, out=staged)
    elif all(v.is_pinned() for v in views):
        for i, v in enumerate(views):
            staged[i * nbytes:(i + 1) * nbytes].copy_(v, non_blocking=True)
    else:
        host = _pinned_staging(n * nbytes)   # [n * bytes per block]
        torch.cat(views, out=host)
        staged.copy_(host, non_blocking=True)
    scatter_blocks(pool, slots, staged.view(pool.dtype).view(shape))   # [n, 2L, B, H, D]
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()   # a pinned source may be freed once this returns


def weights_fingerprint(model_path) -> str:
    """A hash of a model folder's config and weights: each weight file's size, its first 64 KiB (the
    safetensors header) and 64 chunks spread over it, so two fine-tunes of one architecture differ
    while a start stays cheap whatever the model's size."""
    h = hashlib.sha256()
    folder = Path(model_path)
    for name in ("config.json", "generation_config.json"):
        if (folder / name).is_file():
            h.update(name.encode() + (folder / name).read_bytes())
    for f in sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            for i in range(_SAMPLES + 1):
                fh.seek(0 if i == 0 else max(0, size * i // (_SAMPLES + 1)))
                h.update(fh.read(_SAMPLE_BYTES))
    return h.hexdigest()


def kv_identity(model_path, config, dtype, block_size: int) -> dict:
    """Everything that changes the KV of a token sequence, as plain JSON values."""
    return {
        "weights": weights_fingerprint(model_path),
        "architecture": config.architecture,
        "dtype": str(dtype).replace("torch.", ""),
        "layers": config.kv_layers, "kv_heads": config.num_kv_heads, "head_dim": config.head_dim,
        "rope_theta": config.rope_theta, "rope_scaling": config.rope_scaling,
        "block_size": block_size,
    }
