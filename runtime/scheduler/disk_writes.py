"""The disk tier's writer: a bounded queue of KV blocks (already copied out of the pool) that a writer
thread drains into the store, and the bounded drain at shutdown.  DiskTier owns one and decides what to
write (write-through on insert); EvictionSaver queues what eviction keeps (write-back, host spills).

It owns the queue's accounting (bytes queued and reserved, keys not yet on disk) and its two counters.
Nothing here touches torch.
"""

import logging
import queue
import threading
import time

logger = logging.getLogger(__name__)
ABANDON_WAIT_S = 1.0   # at shutdown, past the deadline: how long the writer may take to finish its current block


class DiskWriter:
    """store: the DiskKVStore; block_bytes: one block's payload size (the queue's unit); max_pending_bytes:
    the queue's bound (reserved and queued blocks together), past which blocks are dropped and counted."""

    def __init__(self, store, block_bytes: int, max_pending_bytes: int = 256 << 20):
        self.store, self.block_bytes, self.max_pending_bytes = store, block_bytes, max_pending_bytes
        self.pending_keys: set = set()              # queued for writing, not yet on disk
        self.pending_bytes = 0
        self._reserved = 0                          # bytes reserved for blocks being copied out of the pool
        self._lock = threading.Lock()
        self._writes: queue.Queue = queue.Queue()
        self._stop_snapshot = None                  # (time, queued, writes, drops) when the stop signal came
        self._abandoned = False                     # shutting down past the deadline: queued writes are dropped
        self.counters = {"disk_write_drops": 0, "disk_write_seconds": 0.0}
        threading.Thread(target=self._write_loop, name="kv-disk-writer", daemon=True).start()

    def reserve(self, n: int) -> int:
        """Room in the write queue for n blocks: how many of them may be queued (the rest count as drops)."""
        with self._lock:
            room = max(0, (self.max_pending_bytes - self.pending_bytes - self._reserved) // self.block_bytes)
            if room < n:
                self.counters["disk_write_drops"] += n - room
            self._reserved += self.block_bytes * min(n, room)
        return min(n, room)

    def queue_write(self, key: bytes, tokens, payload) -> None:
        """Hand one block to the writer thread (after reserve())."""
        with self._lock:
            self._reserved -= self.block_bytes
            self.pending_bytes += self.block_bytes
            self.pending_keys.add(key)
        self._writes.put((key, list(tokens), payload, self.block_bytes))

    def _write_loop(self) -> None:
        while True:
            item = self._writes.get()
            if item is None:   # close()
                return
            key, tokens, payload, nbytes = item
            started = time.perf_counter()
            try:
                if self._abandoned:
                    self.counters["disk_write_drops"] += 1
                else:
                    self.store.write(key, tokens, payload)
            except Exception:
                logger.exception("KV disk tier: writing a block failed")
            finally:
                with self._lock:
                    self.pending_keys.discard(key)
                    self.pending_bytes -= nbytes
                self.counters["disk_write_seconds"] += time.perf_counter() - started

    def stopping(self) -> None:
        """The stop signal came (a signal handler calls this: it only reads): what close() reports from."""
        if self._stop_snapshot is None:
            self._stop_snapshot = (time.monotonic(), len(self.pending_keys), self.store.counters["writes"],
                                   self.counters["disk_write_drops"])

    def close(self, deadline: float, persisted: int = 0) -> dict:
        """Shutdown: let the writer finish the queued writes until `deadline` (time.monotonic()), then drop
        the rest (a block being written is finished, so no temporary is left); logs and returns
        {"queued", "written", "dropped", "seconds"}, counted from stopping() (or from now); `persisted`:
        blocks queued since then that only memory held (EvictionSaver.persist)."""
        self.stopping()
        started, queued, writes_before, drops_before = self._stop_snapshot
        queued += persisted
        self.drain(max(0.0, deadline - time.monotonic()))
        self._abandoned = True
        self.drain(max(0.0, deadline - time.monotonic()) + ABANDON_WAIT_S)   # the drops are instant
        out = {"queued": queued, "written": self.store.counters["writes"] - writes_before,
               "dropped": self.counters["disk_write_drops"] - drops_before + len(self.pending_keys),
               "seconds": time.monotonic() - started}
        self._writes.put(None)   # the writer thread ends after the queue
        logger.info("KV disk tier: stopping with %d queued block writes (%d of them only in memory until now): "
                    "%d written, %d dropped (%.2f s)", queued, persisted, out["written"], out["dropped"], out["seconds"])
        return out

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write is on disk (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.pending_keys:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True
