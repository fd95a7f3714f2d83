"""Recurrent-state snapshots at radix-tree nodes (no torch), the prefix cache of models whose layers keep a
fixed-size state per request (Mamba-2 mixers, gated delta nets, short convolutions) besides KV.

Such a request can start from a cached prefix only where the state after exactly that prefix was kept: the KV
of the prefix alone cannot rebuild it.  So a node may own one snapshot slot (`node.state`), holding the state
after the node's last token; a match is usable only up to the deepest node of its path that owns one.

The runner keeps rows' states and snapshots in one table of state slots (a request row r is slot r); this class
hands out the snapshot slots and records, in order, the copies the runner must make before the next forward:
(src, dst) pairs, a save (row -> snapshot) or a load (snapshot -> row).  Copies are applied in the order they were
recorded, so a row saved when its request leaves may be reused by the next request in the same step, and a
snapshot freed and handed out again is written in the right order.
"""

from __future__ import annotations


class StateSnapshots:
    def __init__(self, slots):
        self.free = list(reversed(list(slots)))
        self.owners: dict[int, object] = {}   # snapshot slot -> the node whose state it holds
        self.copies: list[tuple[int, int]] = []

    @property
    def capacity(self) -> int:
        return len(self.free) + len(self.owners)

    def save(self, node, row: int) -> bool:
        """The state of table row `row` now ends at `node` (its tokens are exactly those up to the node's end):
        keep it there, taking the snapshot slot of the least recently used unlocked node if none is free.
        False when every snapshot belongs to a locked node (nothing kept)."""
        if node.state is not None:   # the same tokens from the same start: the same state
            return True
        slot = self._take(node)
        if slot is None:
            return False
        node.state = slot
        self.owners[slot] = node
        self.copies.append((row, slot))
        return True

    def load(self, node, row: int) -> None:
        """Table row `row` starts from the state at `node` (which a request admitted at it keeps locked)."""
        self.copies.append((node.state, row))

    def take_copies(self) -> list[tuple[int, int]]:
        out, self.copies = self.copies, []
        return out

    def _take(self, keep) -> int | None:
        if not self.free:
            self._reclaim(keep)
        return self.free.pop() if self.free else None

    def _reclaim(self, keep) -> None:
        """Give back the slots of removed nodes (evicted or flushed), else the least recently used unlocked one."""
        gone = [slot for slot, node in self.owners.items() if node.removed or node.state != slot]
        if not gone:
            unlocked = [(node.last_access, slot) for slot, node in self.owners.items()
                        if node.lock_ref == 0 and node is not keep]
            gone = [min(unlocked)[1]] if unlocked else []
        for slot in gone:
            node = self.owners.pop(slot)
            if node.state == slot:
                node.state = None
            self.free.append(slot)
