"""What the radix tree evicts from the device, kept below it: the tree's on_evict hook.

For each evicted node, the whole blocks (`block_size` tokens from a multiple of it) that end inside it
are copied out of the KV pool on the scheduler thread, before the node's slots are freed, then:
- with a host tier, into the host pool (every block: the host tier is an LRU cache of what the device
  dropped); the blocks the host pool evicts to stay in bound go to the disk tier, if there is one and
  the block is worth keeping there (write-through: not yet on disk; write-back: the rule below);
- without one, under --kv-disk-write-policy write_back, to the disk tier's writer when worth keeping.

Write-back's rule ("worth keeping"): the block's node was reused, i.e. matched by an admitted request,
at least once since it entered the tree (tree.record_hit); a prefix computed once and never shared is
not written.  The part of a block that starts in an ancestor node is read from the ancestor's slots
(still in the tree).  A partial block at the node's end is dropped.  Nothing here touches torch.
"""

import logging

from radixlm.radix_cache.page_hash import chain_keys

logger = logging.getLogger(__name__)


class EvictionSaver:
    def __init__(self, tier, tree, runner, pinned: bool = False):
        self.tier, self.tree, self.runner = tier, tree, runner
        self.pinned = pinned          # host copies into page-locked memory (CUDA)

    def __call__(self, node) -> None:
        try:
            self._save(node)
        except Exception:   # a block not kept is recomputed later; eviction itself must go on
            logger.exception("KV tiers: keeping an evicted block failed")

    def persist(self) -> int:
        """Shutdown: queue for disk what only memory holds and disk should keep: the host pool's blocks
        worth keeping, and under write_back the reused blocks still in the tree.  Returns how many."""
        tier = self.tier
        if tier.store is None or not tier.store.writable:
            return 0
        before = tier.counters["disk_writeback_blocks"] + tier.counters["host_spilled_blocks"]
        for block in tier.host.blocks() if tier.host is not None else []:
            self._spill(block)
        for node in list(self.tree.nodes()) if tier.write_back else []:
            if node.hits:
                self._save(node, to_disk=True)
        return tier.counters["disk_writeback_blocks"] + tier.counters["host_spilled_blocks"] - before

    def _save(self, node, to_disk: bool = False) -> None:
        tier, B = self.tier, self.tier.block_size
        to_host = tier.host is not None and not to_disk
        namespace, tokens, slots = self.tree.node_prefix(node)
        end = len(tokens)
        first, last = (end - len(node.key)) // B, end // B     # blocks ending inside the node
        if first >= last:
            return
        keys = chain_keys(tier.start_key(namespace), tokens[:last * B], B)
        if to_host:
            todo = [b for b in range(first, last) if not tier.host.contains(keys[b])]
        elif not node.hits:
            tier.counters["disk_writeback_skipped"] += last - first
            return
        else:
            todo = [b for b in range(first, last) if not tier.on_disk(keys[b])]
            todo = todo[:tier.writer.reserve(len(todo))]
        if not todo:
            return
        pinned = {"pinned": True} if self.pinned and to_host else {}
        payloads = self.runner.read_kv([s for b in todo for s in slots[b * B:(b + 1) * B]], B, **pinned)
        for b, payload in zip(todo, payloads):
            block_tokens = tokens[b * B:(b + 1) * B]
            if not to_host:
                tier.writer.queue_write(keys[b], block_tokens, payload)
                tier.counters["disk_writeback_blocks"] += 1
                continue
            for spilled in tier.host.put(keys[b], block_tokens, payload, node.hits):
                self._spill(spilled)

    def _spill(self, block) -> None:
        """A block the host pool let go: to disk when there is one and it is worth keeping there."""
        tier = self.tier
        if tier.store is None or not tier.store.writable or tier.on_disk(block.key):
            return
        if tier.write_back and not block.hits:
            tier.counters["disk_writeback_skipped"] += 1
            return
        if tier.writer.reserve(1):
            tier.writer.queue_write(block.key, block.tokens, block.payload)
            tier.counters["host_spilled_blocks"] += 1
