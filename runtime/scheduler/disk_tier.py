"""The tiers behind the radix tree (disk, and host memory): blocks loaded back before a prefill.

Write-through: whenever a request's computed tokens enter the tree, each new whole block of them
(`block_size` tokens from a multiple of it), and the tail past the last one, is copied out of the KV
pool on the scheduler thread (so a slot reused later cannot tear it) and handed to the tier's
DiskWriter (disk_writes.py), whose thread writes it.  Loading: a request whose prompt goes on past its in-memory match with blocks the
host pool or the store holds waits here, off the waiting queue, while a loader thread reads and checks
the disk ones (host ones need no reading); then, on the scheduler thread, they get free slots, their
KV is copied in and they are inserted into the tree, and the request joins the waiting queue where its
usual prefix match finds them.  Other requests keep running meanwhile.

The runner moves the bytes: read_kv(slots) -> one contiguous payload per block, write_kv(slots,
payloads).  Nothing here touches torch.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from radixlm.radix_cache.page_hash import block_key, chain_keys, namespace_key
from radixlm.runtime.scheduler.disk_writes import DiskWriter
from radixlm.runtime.scheduler.read_buffers import ReadBuffers

logger = logging.getLogger(__name__)

HOLD_PLANS = 64       # plans a loaded request's blocks stay locked while it waits for admission
DEFER_LIMIT_S = 10.0   # longest a loaded request waits for room in the KV pool before it recomputes instead
READ_THREADS = 4      # block files one load reads at once (file reads and CRCs release the GIL)
READ_BUFFER_BYTES = 256 << 20   # read buffers kept for reuse


@dataclass
class _Load:
    req: object
    first: int            # index of the first block to read
    keys: list
    tokens: list          # token ids of each block
    payloads: list        # one per block: from the host tier, or None until the loader reads it from disk
    from_host: list       # one per block: its payload came from the host tier
    deferred_at: float = None   # when its install first waited for room in the KV pool


def _limit(req) -> int:
    """How many of req's tokens a cache may give it: one is always computed (its logits), and none from
    which input logprobs are asked."""
    limit = req.seq_len - 1
    if req.return_logprob and req.logprob_start_len >= 0:
        limit = min(limit, req.logprob_start_len - 1)
    return max(0, limit)


class DiskTier:
    """store: the DiskKVStore, or None (a host tier alone); host: a HostKVStore, or None.  write_back:
    blocks are not written on insert (evict_saver.EvictionSaver writes them when the tree evicts them)."""

    def __init__(self, store, kv, runner, block_size: int, max_pending_bytes: int = 256 << 20, host=None,
                 header: bytes = None, write_back: bool = False):
        if block_size % kv.page_size:
            raise ValueError(f"the disk block ({block_size} tokens) must be a multiple of the page size "
                             f"({kv.page_size})")
        self.store, self.kv, self.runner, self.host = store, kv, runner, host
        self.header = header if header is not None else store.header
        self.write_back = write_back
        self.block_size = block_size
        self.loading: dict[int, object] = {}        # id(req) -> req waiting for its load
        self._loads: queue.Queue = queue.Queue()
        self._buffers = ReadBuffers(READ_BUFFER_BYTES)
        self._loaded: queue.Queue = queue.Queue()
        self._starts: dict = {}
        self._installed: list = []                  # (node, req, plans seen): locked from install to admission
        self._deferred: list = []                   # loads read, waiting for room in the KV pool
        self.counters = {"disk_load_requests": 0, "disk_loaded_blocks": 0, "disk_loaded_tokens": 0,
                         "disk_load_seconds": 0.0, "disk_install_seconds": 0.0, "disk_install_gave_up": 0, "disk_writeback_blocks": 0,
                         "disk_writeback_skipped": 0, "host_loaded_tokens": 0, "host_spilled_blocks": 0}
        # the write side: None without a store (a host tier alone)
        self.writer = (DiskWriter(store, runner.kv_bytes_per_token * block_size, max_pending_bytes)
                       if store is not None else None)
        if store is not None:
            threading.Thread(target=self._load_loop, name="kv-disk-loader", daemon=True).start()

    # ---- keys ----
    def start_key(self, namespace) -> bytes:
        start = self._starts.get(namespace)
        if start is None:
            start = self._starts[namespace] = namespace_key(self.header, namespace)
        return start

    def _keys(self, req, n_blocks: int) -> list:
        if req.disk_keys is None:
            req.disk_keys = []
        if len(req.disk_keys) < n_blocks:
            chain_keys(self.start_key(req.cache_namespace), req.fill_ids[:n_blocks * self.block_size],
                       self.block_size, req.disk_keys)
        return req.disk_keys

    def on_disk(self, key: bytes) -> bool:
        """On disk or queued for writing."""
        return self.writer is not None and (key in self.writer.pending_keys or self.store.contains(key))

    # ---- writing (the writer writes; the tier decides what) ----
    def on_insert(self, req) -> None:
        """Write through: queue the whole blocks of req's computed tokens not yet on disk, and the tail
        block (the computed tokens past the last whole block), so a restart recomputes none of them."""
        B = self.block_size
        n_blocks = req.settled_len // B
        if self.writer is None or not self.store.writable or self.write_back:
            return
        keys = self._keys(req, n_blocks)
        todo = [b for b in range(req.disk_written, n_blocks) if not self.on_disk(keys[b])]
        req.disk_written = max(req.disk_written, n_blocks)
        todo = todo[:self.writer.reserve(len(todo))]
        if todo:
            slots = [s for b in todo for s in req.kv_slots[b * B:(b + 1) * B]]
            payloads = self.runner.read_kv(slots, B)
            for b, payload in zip(todo, payloads):
                self.writer.queue_write(keys[b], req.fill_ids[b * B:(b + 1) * B], payload)
        self._write_tail(req, n_blocks)

    def _write_tail(self, req, n_blocks: int) -> None:
        start = n_blocks * self.block_size
        end = req.settled_len - (req.settled_len - start) % self.kv.page_size
        if end <= start or req.disk_tail_written >= end:
            return
        req.disk_tail_written = end
        tokens = req.fill_ids[start:end]
        key = block_key(self._parent_key(req, n_blocks), tokens)
        if self.on_disk(key) or not self.writer.reserve(1):
            return
        self.writer.queue_write(key, tokens, self.runner.read_kv(req.kv_slots[start:end], end - start)[0])

    def stopping(self) -> None:
        """The stop signal came (a signal handler calls this): see DiskWriter.stopping."""
        if self.writer is not None:
            self.writer.stopping()

    def close(self, deadline: float, persisted: int = 0) -> dict:
        """Shutdown: the queued writes get until `deadline`; DiskWriter.close's report ({} without a store).  The
        loader thread ends (it holds the runner)."""
        if self.store is not None:
            self._loads.put(None)
        return self.writer.close(deadline, persisted) if self.writer is not None else {}

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write is on disk (tests, shutdown); False on timeout."""
        return self.writer is None or self.writer.drain(timeout)

    # ---- loading ----
    def busy(self) -> bool:
        return bool(self.loading or self._installed)

    def on_arrival(self, req) -> bool:
        """True when req waits here for blocks from disk (poll() hands it back); False: queue it now."""
        B, limit = self.block_size, _limit(req)
        n_blocks = limit // B
        in_memory = min(self.kv.tree.prefix_len(req.fill_ids, req.cache_namespace), limit)
        first = in_memory // B
        keys = self._keys(req, n_blocks)
        end, payloads = first, []
        while end < n_blocks:
            tokens = req.fill_ids[end * B:(end + 1) * B]
            payload = self.host.get(keys[end], tokens) if self.host is not None else None
            if payload is None and not (self.store is not None and self.store.contains(keys[end])):
                break
            payloads.append(payload)
            end += 1
        keys, tokens = keys[first:end], [req.fill_ids[b * B:(b + 1) * B] for b in range(first, end)]
        covered = end * B
        tail = self._find_tail(req, keys[-1] if keys else self._parent_key(req, first), end, in_memory) \
            if end else None                        # where the whole blocks end (none at all: a cold prompt)
        if tail is not None:
            keys, tokens, covered = keys + [tail[0]], tokens + [tail[1]], covered + len(tail[1])
            payloads.append(None)
        if covered <= in_memory:
            return False
        self.loading[id(req)] = req
        job = _Load(req, first, keys, tokens, payloads, [p is not None for p in payloads])
        if all(job.from_host):
            self._loaded.put(job)               # nothing to read: installed in the next poll
        else:
            self.counters["disk_load_requests"] += 1
            self._loads.put(job)
        return True

    def _parent_key(self, req, n_blocks: int) -> bytes:
        """The chain key before block n_blocks of req."""
        return self._keys(req, n_blocks)[n_blocks - 1] if n_blocks else self.start_key(req.cache_namespace)

    def _find_tail(self, req, parent: bytes, n_blocks: int, in_memory: int):
        """(key, tokens) of the longest tail block on disk that goes on from n_blocks whole blocks past what
        the tree holds: fewer than block_size tokens, written when a request's computed tokens ended inside
        a block (the tokens a restart would otherwise recompute), or None."""
        if self.store is None:
            return None
        start, P = n_blocks * self.block_size, self.kv.page_size
        longest = min(self.block_size - 1, req.seq_len - start)
        for r in range(longest - longest % P, max(0, in_memory - start), -P):
            tokens = req.fill_ids[start:start + r]
            key = block_key(parent, tokens)
            if self.store.contains(key):
                return key, tokens
        return None

    def _load_loop(self) -> None:
        readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="kv-disk-read")
        while True:
            job = self._loads.get()
            if job is None:   # close()
                readers.shutdown(wait=False)
                return
            started = time.perf_counter()
            todo = [i for i, p in enumerate(job.payloads) if p is None]      # the others came from the host tier
            for i, payload in zip(todo, readers.map(lambda i: self._read(job.keys[i], job.tokens[i]), todo)):
                job.payloads[i] = payload
            if None in job.payloads:
                self._buffers.give_back(job.payloads[job.payloads.index(None):])
                del job.payloads[job.payloads.index(None):]
            self.counters["disk_load_seconds"] += time.perf_counter() - started
            self._loaded.put(job)

    def _read(self, key, tokens):
        try:
            return self.store.read(key, tokens, self._buffers.take)
        except Exception:   # never let one bad file stop the loader
            logger.exception("KV disk tier: reading a block failed")
            return None

    def poll(self) -> list:
        """Install finished loads into the tree; returns their requests (aborted ones dropped).  What is
        installed stays locked until its request is admitted (see release_installed), so installing one
        request's blocks, or running others, cannot evict them first."""
        jobs, self._deferred = self._deferred, []
        while True:
            try:
                jobs.append(self._loaded.get_nowait())
            except queue.Empty:
                break
        ready = []
        for job in jobs:
            req = job.req
            started = time.perf_counter()
            try:
                done = req.aborted or self._install(req, job)
            except Exception:   # a block that cannot be installed is recomputed, never served wrong
                logger.exception("KV disk tier: installing loaded blocks for %s failed", req.rid)
                done = True
            self.counters["disk_install_seconds"] += time.perf_counter() - started
            if not done:
                self._deferred.append(job)
                continue
            self._buffers.give_back(job.payloads)
            self.loading.pop(id(req), None)
            if not req.aborted:
                ready.append(req)
        return ready

    def _install(self, req, job: _Load) -> bool:
        """Put the loaded blocks into free slots and the tree; False (nothing changed) while the pool has
        no room for them and the rest of the request, so a load never evicts what the next plan needs.
        After DEFER_LIMIT_S of waiting the request goes on without them (recomputing them)."""
        B, tree, alloc = self.block_size, self.kv.tree, self.kv.allocator
        payloads = job.payloads
        if not payloads:
            return True
        starts = [job.first * B]                    # where each loaded block starts (the last may be a tail)
        for t in job.tokens[:len(payloads)]:
            starts.append(starts[-1] + len(t))
        end = starts[-1]
        ids = req.fill_ids[:end]
        m = tree.match_prefix(ids, req.cache_namespace)
        if m.length < job.first * B:
            return True                             # the prefix before the loaded blocks was evicted meanwhile
        skip = sum(1 for e in starts[1:] if e <= m.length)   # blocks that reached memory meanwhile
        todo = payloads[skip:]
        if not todo:
            return True
        lo = starts[skip]
        n = end - lo
        tree.inc_lock_ref(m.node)
        try:
            if n + req.seq_len - end + self.kv.page_size > self.kv.available():
                now = time.monotonic()
                job.deferred_at = job.deferred_at or now
                if now - job.deferred_at < DEFER_LIMIT_S:
                    return False
                self.counters["disk_install_gave_up"] += 1
                return True
            slots = self._write_into_free_slots(n, todo)
            if slots is None:
                return True
            present = tree.insert(ids, list(m.slots[:lo]) + slots, req.cache_namespace)
            if present > lo:
                alloc.free(slots[:present - lo])    # duplicates of what the tree had
        finally:
            tree.dec_lock_ref(m.node)
        used_end = max(lo, min(end, _limit(req)))      # a tail block may hold the request's last token too
        req.disk_span = (max(present, lo), used_end)
        req.host_ranges = [(max(starts[i], req.disk_span[0]), min(starts[i + 1], used_end))
                           for i in range(skip, len(payloads)) if job.from_host[i]]
        host_tokens = sum(hi - lo_ for lo_, hi in req.host_ranges if hi > lo_)
        self.counters["host_loaded_tokens"] += host_tokens
        node = tree.match_prefix(ids, req.cache_namespace).node
        tree.inc_lock_ref(node)
        self._installed.append((node, req, 0))
        self.counters["disk_loaded_blocks"] += len(todo)
        self.counters["disk_loaded_tokens"] += max(0, used_end - max(present, lo)) - host_tokens
        return True

    def _write_into_free_slots(self, n: int, payloads: list):
        """n free slots (evicting from the tree if needed) holding `payloads` (whole blocks, then perhaps a
        tail block), or None when the pool has no room."""
        B, alloc = self.block_size, self.kv.allocator
        slots = alloc.alloc(n)
        if slots is None:
            freed = self.kv.tree.evict(n)
            if freed:
                alloc.free(freed)
            slots = alloc.alloc(n)
        if slots is None:
            return None
        try:
            whole = n // B * B
            if whole:
                self.runner.write_kv(slots[:whole], payloads[:n // B])
            if n > whole:
                self.runner.write_kv(slots[whole:], payloads[-1:])     # the tail block
        except Exception:
            alloc.free(slots)
            raise
        return slots

    def release_installed(self) -> None:
        """After each plan: unlock the blocks of requests admitted (they hold their own locks now), aborted,
        or not admitted within HOLD_PLANS plans (so a request the pool cannot take yet does not pin
        memory the running ones need)."""
        keep = []
        for node, req, plans in self._installed:
            if req.row is None and not req.aborted and not req.finished and plans < HOLD_PLANS:
                keep.append((node, req, plans + 1))
            else:
                self.kv.tree.dec_lock_ref(node)
        self._installed = keep

    def remove(self, rid) -> list:
        """Requests with this rid that wait for a load, marked aborted (their loads are read, then dropped)."""
        out = [r for r in self.loading.values() if r.rid == rid]
        for r in out:
            r.aborted = True
        return out

    def stats(self) -> dict:
        out = dict(self.store.stats()) if self.store is not None else {}
        if self.host is not None:
            out.update(self.host.stats())
        out.update(self.counters)
        out.update(self.writer.counters if self.writer is not None else {"disk_write_drops": 0,
                                                                          "disk_write_seconds": 0.0})
        out["disk_block_size"] = self.block_size
        out["disk_loading_reqs"] = len(self.loading)
        out["disk_pending_write_bytes"] = self.writer.pending_bytes if self.writer is not None else 0
        return out
