"""Content-addressed files of KV blocks on disk, bounded in size, LRU (no torch).

One file per block: `<dir>/<layout>/<kk>/<key>.kv`, where layout is the first 16 hex digits of the
header key (page_hash.header_key) and key the block's chain key.  A file holds a fixed header, the
block's token ids and the K/V payload, with a CRC of the header fields and tokens and a checksum of
the payload:

    magic "RLMKV2\\0\\0" | header key (32) | block key (32) | n_tokens u32 | payload bytes u64 |
    crc32 u32 (of these fields, the checks zeroed, and the tokens) | payload check kind u8 | payload check u64 |
    tokens int64 x n_tokens | payload

The payload check is zlib's crc32 (kind 0), or, where the store is given one, a faster 64-bit checksum
(kind 1: the native kernels' checksum64, about 6x crc32's speed; `checksum64_reference` is the same
function in Python).  A file whose kind this store cannot compute is a miss.

Files are written to a temporary name and renamed, so a reader sees a whole file or none.  A file that
is short, fails its CRC, names another key, another layout or other tokens is a miss and is deleted:
never a wrong answer.  A full or read-only disk turns writing off with one log line (reads go on).
Thread-safe: the scheduler probes, a writer thread writes, a loader thread reads.  Several processes
may share one folder (data-parallel replicas, or servers of the same model): files are whole when
renamed into place, a block another process wrote is found by its path on the first probe that misses
the index, and one deleted under us is a miss.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence

logger = logging.getLogger(__name__)

MAGIC = b"RLMKV2\x00\x00"
_FIXED = struct.Struct("<32s32sIQIBQ")      # header key, block key, n_tokens, payload bytes, crc32, check kind, check
CRC32, CHECKSUM64 = 0, 1
_M64 = (1 << 64) - 1
_FNV_PRIME, _FNV_BASIS, _GOLDEN = 0x100000001B3, 0xCBF29CE484222325, 0x9E3779B97F4A7C15
_HEAD = len(MAGIC) + _FIXED.size
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def checksum64_reference(data) -> int:
    """radixlm_kernels/csrc/cpu_kv_copy.c's radixlm_checksum64 in Python: eight FNV-1a-style lanes over
    little-endian 64-bit words (word i to lane i % 8), the zero-padded tail into lane 0, then the
    lanes and the length folded together."""
    view = memoryview(data).cast("B")
    n, words = view.nbytes, view.nbytes // 8
    h = [_FNV_BASIS ^ ((j * _GOLDEN) & _M64) for j in range(8)]
    for i, w in enumerate(struct.unpack_from(f"<{words}Q", view)):
        h[i % 8] = ((h[i % 8] ^ w) * _FNV_PRIME) & _M64
    if n % 8:
        w = int.from_bytes(view[8 * words:], "little")
        h[0] = ((h[0] ^ w ^ ((n % 8) << 56)) * _FNV_PRIME) & _M64
    r = n
    for lane in h:
        r = ((r ^ lane) * _FNV_PRIME) & _M64
    return r ^ (r >> 29)


class DiskKVStore:
    def __init__(self, root: str | os.PathLike, header: bytes, max_bytes: int, checksum64=None):
        """checksum64(bytes-like) -> int: the payload check of the files this store writes (kind 1), and
        what it verifies kind-1 files with; None: crc32 (kind 0) only."""
        if max_bytes <= 0:
            raise ValueError(f"the disk tier's size bound must be positive, got {max_bytes}")
        self.header = header
        self.max_bytes = max_bytes
        self.checksum64 = checksum64
        self.dir = Path(root) / header.hex()[:16]
        self._lock = threading.Lock()
        self._index: OrderedDict[bytes, int] = OrderedDict()   # key -> file bytes, least recent first
        self.bytes = 0
        self.writable = True
        self.counters = {"writes": 0, "write_bytes": 0, "reads": 0, "read_bytes": 0, "corrupt": 0,
                         "deleted": 0, "write_errors": 0}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._turn_writes_off(exc)
        self._scan()

    # ---- index ----
    def _scan(self) -> None:
        """Index the files a previous server left (oldest access first); drop torn temporaries."""
        found = []
        try:
            subdirs = [d for d in os.scandir(self.dir) if d.is_dir()]
        except OSError:
            return
        for sub in subdirs:
            for entry in os.scandir(sub.path):
                if ".tmp" in entry.name:
                    self._unlink(entry.path)
                    continue
                if not entry.name.endswith(".kv"):
                    continue
                try:
                    key = bytes.fromhex(entry.name[:-3])
                    st = entry.stat()
                except (ValueError, OSError):
                    continue
                if len(key) == 32:
                    found.append((st.st_mtime_ns, key, st.st_size))
        for _, key, size in sorted(found):
            self._index[key] = size
            self.bytes += size
        if found:
            logger.info("KV disk tier: %d blocks (%.1f MiB) found in %s", len(found), self.bytes / 2**20, self.dir)
        self._evict_over_bound()

    def contains(self, key: bytes) -> bool:
        with self._lock:
            if key in self._index:
                return True
        try:
            size = self.path(key).stat().st_size       # written by another process sharing the folder
        except OSError:
            return False
        with self._lock:
            if key not in self._index:
                self._index[key] = size
                self.bytes += size
        return True

    def __len__(self) -> int:
        return len(self._index)

    def path(self, key: bytes) -> Path:
        h = key.hex()
        return self.dir / h[:2] / f"{h}.kv"

    # ---- writing ----
    def write(self, key: bytes, tokens: Sequence[int], payload) -> bool:
        """Store one block (payload: a bytes-like object); False when not written (exists, writing off,
        or the disk refused)."""
        if not self.writable or self.contains(key):
            return False
        tok = struct.pack(f"<{len(tokens)}q", *tokens)
        view = memoryview(payload).cast("B")
        kind = CRC32 if self.checksum64 is None else CHECKSUM64
        check = zlib.crc32(view) if kind == CRC32 else self.checksum64(view)
        crc = zlib.crc32(tok, zlib.crc32(_FIXED.pack(self.header, key, len(tokens), view.nbytes, 0, 0, 0)))
        fixed = _FIXED.pack(self.header, key, len(tokens), view.nbytes, crc, kind, check)
        size = _HEAD + len(tok) + view.nbytes
        if size > self.max_bytes:
            return False
        final = self.path(key)
        tmp = final.with_name(f"{final.name}.tmp{os.getpid()}.{threading.get_ident()}")
        try:
            final.parent.mkdir(exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(MAGIC)
                f.write(fixed)
                f.write(tok)
                f.write(view)
            os.replace(tmp, final)
        except OSError as exc:
            self._unlink(tmp)
            self.counters["write_errors"] += 1
            if exc.errno in _DISK_FULL:
                self._turn_writes_off(exc)
            else:
                logger.warning("KV disk tier: writing %s failed: %s", final.name, exc)
            return False
        with self._lock:
            if key not in self._index:
                self._index[key] = size
                self.bytes += size
            self.counters["writes"] += 1
            self.counters["write_bytes"] += size
        self._evict_over_bound()
        return True

    def _turn_writes_off(self, exc: OSError) -> None:
        if self.writable:
            self.writable = False
            logger.error("KV disk tier: %s (%s); writing to the disk tier is off from now on, cached blocks "
                         "already there are still read", self.dir, exc)

    def _evict_over_bound(self) -> None:
        while True:
            with self._lock:
                if self.bytes <= self.max_bytes or not self._index:
                    return
                key, size = self._index.popitem(last=False)
                self.bytes -= size
                self.counters["deleted"] += 1
            self._unlink(self.path(key))

    # ---- reading ----
    def read(self, key: bytes, tokens: Sequence[int], buffer=None) -> Optional[memoryview]:
        """The payload of the block `key` holding `tokens` (a writable view, not a copy), or None (a miss;
        a bad file is deleted).  buffer(size) -> a bytearray of that size to read into (a recycled one
        saves the page faults of fresh memory); the payload is a view of it."""
        if not self.contains(key):
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                whole = buffer(size) if buffer is not None else bytearray(size)
                got = f.readinto(whole)
            data = memoryview(whole)[:got]
        except FileNotFoundError:
            self._forget(key)
            return None
        except OSError as exc:
            logger.warning("KV disk tier: reading %s failed: %s", path.name, exc)
            return None
        payload = self._verify(data, key, tokens)
        if payload is None:
            self.counters["corrupt"] += 1
            logger.warning("KV disk tier: %s is torn or foreign; deleted, and its block recomputed", path.name)
            self._forget(key)
            self._unlink(path)
            return None
        with self._lock:
            if key in self._index:
                self._index.move_to_end(key)
            self.counters["reads"] += 1
            self.counters["read_bytes"] += len(data)
        try:
            now = time.time_ns()
            os.utime(path, ns=(now, now))   # the LRU order outlives a restart
        except OSError:
            pass
        return payload

    def _verify(self, data: memoryview, key: bytes, tokens: Sequence[int]) -> Optional[memoryview]:
        if len(data) < _HEAD or data[:len(MAGIC)] != MAGIC:
            return None
        header, file_key, n, nbytes, crc, kind, check = _FIXED.unpack_from(data, len(MAGIC))
        if header != self.header or file_key != key or n != len(tokens) or len(data) != _HEAD + 8 * n + nbytes:
            return None
        tok = data[_HEAD:_HEAD + 8 * n]
        if zlib.crc32(tok, zlib.crc32(_FIXED.pack(header, file_key, n, nbytes, 0, 0, 0))) != crc:
            return None
        if struct.unpack_from(f"<{n}q", tok) != tuple(tokens):
            return None
        payload = data[_HEAD + 8 * n:]
        if kind == CRC32:
            ok = zlib.crc32(payload) == check
        else:
            ok = kind == CHECKSUM64 and self.checksum64 is not None and self.checksum64(payload) == check
        return payload if ok else None

    def _forget(self, key: bytes) -> None:
        with self._lock:
            size = self._index.pop(key, None)
            if size is not None:
                self.bytes -= size

    def _unlink(self, path) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    def stats(self) -> dict:
        with self._lock:
            return {"disk_blocks": len(self._index), "disk_bytes": self.bytes, "disk_max_bytes": self.max_bytes,
                    "disk_writable": self.writable, **{f"disk_{k}": v for k, v in self.counters.items()}}
