"""The disk tier's write side, mixed into DiskTier: write-through on insert (whole blocks and the tail
block), the queue the writer thread drains, and the bounded drain at shutdown.

Uses DiskTier's store, runner, kv, block_size, counters, key helpers and pending-write state.  Nothing
here touches torch.
"""

import logging
import time

from radixlm.radix_cache.page_hash import block_key

logger = logging.getLogger(__name__)
ABANDON_WAIT_S = 1.0   # at shutdown, past the deadline: how long the writer may take to finish its current block


class DiskWrites:
    def on_insert(self, req) -> None:
        """Write through: queue the whole blocks of req's computed tokens not yet on disk, and the tail
        block (the computed tokens past the last whole block), so a restart recomputes none of them."""
        B = self.block_size
        n_blocks = req.computed_len // B
        if self.store is None or not self.store.writable or self.write_back:
            return
        keys = self._keys(req, n_blocks)
        todo = [b for b in range(req.disk_written, n_blocks) if not self.on_disk(keys[b])]
        req.disk_written = max(req.disk_written, n_blocks)
        todo = todo[:self.reserve(len(todo))]
        if todo:
            slots = [s for b in todo for s in req.kv_slots[b * B:(b + 1) * B]]
            payloads = self.runner.read_kv(slots, B)
            for b, payload in zip(todo, payloads):
                self.queue_write(keys[b], req.fill_ids[b * B:(b + 1) * B], payload)
        self._write_tail(req, n_blocks)

    def _write_tail(self, req, n_blocks: int) -> None:
        start = n_blocks * self.block_size
        end = req.computed_len - (req.computed_len - start) % self.kv.page_size
        if end <= start or req.disk_tail_written >= end:
            return
        req.disk_tail_written = end
        tokens = req.fill_ids[start:end]
        key = block_key(self._parent_key(req, n_blocks), tokens)
        if self.on_disk(key) or not self.reserve(1):
            return
        self.queue_write(key, tokens, self.runner.read_kv(req.kv_slots[start:end], end - start)[0])

    def reserve(self, n: int) -> int:
        """Room in the write queue for n blocks: how many of them may be queued (the rest count as drops)."""
        block_bytes = self.runner.kv_bytes_per_token * self.block_size
        with self._pending_lock:
            room = max(0, (self.max_pending_bytes - self._pending_bytes - self._reserved) // block_bytes)
            if room < n:
                self.counters["disk_write_drops"] += n - room
            self._reserved += block_bytes * min(n, room)
        return min(n, room)

    def queue_write(self, key: bytes, tokens, payload) -> None:
        """Hand one block to the writer thread (after reserve())."""
        block_bytes = self.runner.kv_bytes_per_token * self.block_size
        with self._pending_lock:
            self._reserved -= block_bytes
            self._pending_bytes += block_bytes
            self._pending_keys.add(key)
        self._writes.put((key, list(tokens), payload, block_bytes))

    def _write_loop(self) -> None:
        while True:
            key, tokens, payload, nbytes = self._writes.get()
            started = time.perf_counter()
            try:
                if self._abandoned:
                    self.counters["disk_write_drops"] += 1
                else:
                    self.store.write(key, tokens, payload)
            except Exception:
                logger.exception("KV disk tier: writing a block failed")
            finally:
                with self._pending_lock:
                    self._pending_keys.discard(key)
                    self._pending_bytes -= nbytes
                self.counters["disk_write_seconds"] += time.perf_counter() - started

    def stopping(self) -> None:
        """The stop signal came (a signal handler calls this: it only reads): what close() reports from."""
        if self._stop_snapshot is None and self.store is not None:
            self._stop_snapshot = (time.monotonic(), len(self._pending_keys), self.store.counters["writes"],
                                   self.counters["disk_write_drops"])

    def close(self, deadline: float, persisted: int = 0) -> dict:
        """Shutdown: let the writer finish the queued writes until `deadline` (time.monotonic()), then drop
        the rest (a block being written is finished, so no temporary is left); logs and returns
        {"queued", "written", "dropped", "seconds"}, counted from stopping() (or from now); `persisted`:
        blocks queued since then that only memory held (EvictionSaver.persist)."""
        self.stopping()
        if self.store is None:
            return {}
        started, queued, writes_before, drops_before = self._stop_snapshot
        queued += persisted
        self.drain(max(0.0, deadline - time.monotonic()))
        self._abandoned = True
        self.drain(max(0.0, deadline - time.monotonic()) + ABANDON_WAIT_S)   # the drops are instant
        out = {"queued": queued, "written": self.store.counters["writes"] - writes_before,
               "dropped": self.counters["disk_write_drops"] - drops_before + len(self._pending_keys),
               "seconds": time.monotonic() - started}
        logger.info("KV disk tier: stopping with %d queued block writes (%d of them only in memory until now): "
                    "%d written, %d dropped (%.2f s)", queued, persisted, out["written"], out["dropped"], out["seconds"])
        return out

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write is on disk (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._pending_keys:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True
