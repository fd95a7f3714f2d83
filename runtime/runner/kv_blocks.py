"""Copies of KV blocks between the KV pool and plain bytes, for the disk tier, and the identity of a KV
layout (what must match before one server may read another's blocks)."""

import hashlib
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
    after the work queued so far; returns once the copies are done, so the slots may be reused."""
    device = pool.k_buffers[0].device
    bufs = (*pool.k_buffers, *pool.v_buffers)
    if device.type == "cpu" and cpu_native.available():
        # one allocation per block: a block kept alone (host tier, disk writer) holds only its own bytes
        out = [torch.empty((len(bufs), block_size, pool.num_kv_heads, pool.head_dim), dtype=pool.dtype,
                           device=device) for _ in range(len(slots) // block_size)]   # [2L, B, H, D] each
        cpu_native.kv_blocks_copy(out, list(bufs), torch.tensor(slots, dtype=torch.long, device=device),
                                  to_pool=False)
        return [block.view(torch.uint8).numpy() for block in out]
    if not (pinned and device.type == "cuda"):
        out = []
        for i in range(0, len(slots), block_size):
            idx = torch.tensor(slots[i:i + block_size], dtype=torch.long, device=device)
            block = torch.stack([buf.index_select(0, idx) for buf in bufs])   # [2L, B, H, D]
            out.append(block.cpu().view(torch.uint8).numpy())
        return out
    stream = _side_stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    hosts = []
    with torch.cuda.stream(stream):
        for i in range(0, len(slots), block_size):
            idx = torch.tensor(slots[i:i + block_size], dtype=torch.long, device=device)
            block = torch.stack([buf.index_select(0, idx) for buf in bufs])   # [2L, B, H, D]
            host = torch.empty(block.shape, dtype=block.dtype, pin_memory=True)  # [2L, B, H, D]
            host.copy_(block, non_blocking=True)
            hosts.append(host)
    stream.synchronize()
    return [h.view(torch.uint8).numpy() for h in hosts]


_SIDE_STREAMS: dict = {}


def _side_stream(device):
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


def write_blocks(pool, slots: list, payloads: list) -> None:
    """Inverse of read_blocks: payloads (bytes-like, one per block) into `slots`.  ValueError, writing
    nothing, when a payload's size does not fit this pool's layout."""
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
    for b, p in enumerate(payloads):
        kv = torch.frombuffer(p, dtype=torch.uint8).view(pool.dtype)
        kv = kv.view(len(bufs), block, pool.num_kv_heads, pool.head_dim).to(device, non_blocking=True)
        lo = slots[b * block]
        if slots[b * block:(b + 1) * block] == list(range(lo, lo + block)):
            for i, buf in enumerate(bufs):
                buf[lo:lo + block].copy_(kv[i])
        else:
            idx = torch.tensor(slots[b * block:(b + 1) * block], dtype=torch.long, device=device)
            for i, buf in enumerate(bufs):
                buf.index_copy_(0, idx, kv[i])
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
        "layers": config.num_layers, "kv_heads": config.num_kv_heads, "head_dim": config.head_dim,
        "rope_theta": config.rope_theta, "rope_scaling": config.rope_scaling,
        "block_size": block_size,
    }
