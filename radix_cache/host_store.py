"""KV blocks in host memory between the device pool and the disk tier, bounded in bytes, LRU (no torch).

The same blocks as the disk tier (page_hash chain keys, one contiguous payload per block in the runner's
read_kv layout), kept as the runner's host buffers.  `put` returns the entries that fell out of the
bound, least recently used first, so the caller can hand them to the disk tier.  Only the scheduler
thread uses it: no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass
class HostBlock:
    key: bytes
    tokens: tuple          # the block's token ids (checked on every get: a key never serves other tokens)
    payload: object        # bytes-like, memoryview(payload).nbytes long
    hits: int              # radix-tree hits of its tokens when it left the device (write-back's rule)


class HostKVStore:
    def __init__(self, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError(f"the host tier's size bound must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._blocks: OrderedDict[bytes, HostBlock] = OrderedDict()   # least recent first
        self.counters = {"stored_blocks": 0, "evicted_blocks": 0, "hit_blocks": 0, "refused_blocks": 0}

    def __len__(self) -> int:
        return len(self._blocks)

    def contains(self, key: bytes) -> bool:
        return key in self._blocks

    def put(self, key: bytes, tokens: Sequence[int], payload, hits: int = 0) -> list:
        """Keep one block (refreshing it when present); returns the HostBlocks evicted to stay in bound
        (a block larger than the whole bound is refused: returned as it came)."""
        size = memoryview(payload).nbytes
        old = self._blocks.pop(key, None)
        if old is not None:
            self.bytes -= memoryview(old.payload).nbytes
            hits = max(hits, old.hits)
        block = HostBlock(key, tuple(tokens), payload, hits)
        if size > self.max_bytes:
            self.counters["refused_blocks"] += 1
            return [block]
        self._blocks[key] = block
        self.bytes += size
        self.counters["stored_blocks"] += old is None
        out = []
        while self.bytes > self.max_bytes:
            _, victim = self._blocks.popitem(last=False)
            self.bytes -= memoryview(victim.payload).nbytes
            self.counters["evicted_blocks"] += 1
            out.append(victim)
        return out

    def blocks(self) -> list:
        """Every block, least recently used first."""
        return list(self._blocks.values())

    def get(self, key: bytes, tokens: Sequence[int]) -> Optional[object]:
        """The payload of `key` if it holds `tokens` (now the most recently used), else None."""
        block = self._blocks.get(key)
        if block is None or block.tokens != tuple(tokens):
            return None
        self._blocks.move_to_end(key)
        self.counters["hit_blocks"] += 1
        return block.payload

    def stats(self) -> dict:
        return {"host_blocks": len(self._blocks), "host_bytes": self.bytes, "host_max_bytes": self.max_bytes,
                **{f"host_{k}": v for k, v in self.counters.items()}}
