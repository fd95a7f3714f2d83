"""Free-list allocator of KV slot indices, page by page (no torch)."""

from __future__ import annotations

from typing import Iterable

from radixlm.radix_cache.ledger import LedgerError


class SlotAllocator:
    """Hands out KV slots 0..num_slots-1 in whole pages of `page_size` slots.

    Page k owns slots [k*P, (k+1)*P). Free pages sit on a stack (LIFO, deterministic).
    Mutating calls: `alloc_extend`, `alloc`, `free`. `available` and `free_slots` only read.
    The caller owns every page it was given until it frees it (or hands it to the tree).
    """

    def __init__(self, num_slots: int, page_size: int = 1):
        if page_size < 1 or num_slots < 0 or num_slots % page_size:
            raise ValueError(f"num_slots={num_slots} must be a multiple of page_size={page_size}")
        self.total = num_slots
        self.page_size = page_size
        num_pages = num_slots // page_size
        self._free_pages = list(range(num_pages - 1, -1, -1))  # pop() hands out page 0 first
        self._is_free = bytearray(b"\x01") * num_pages

    def available(self) -> int:
        """Number of free slots (a multiple of page_size)."""
        return len(self._free_pages) * self.page_size

    def alloc(self, n: int) -> list[int] | None:
        """Slots for a new sequence of n tokens; same as `alloc_extend(0, None, n)`."""
        return self.alloc_extend(0, None, n)

    def alloc_extend(self, prev_len: int, last_slot: int | None, n: int) -> list[int] | None:
        """Slots for n more tokens of a sequence that has prev_len tokens, the last in last_slot.

        With P > 1 the first tokens fill the rest of last_slot's page (last_slot+1, ...), the
        others get fresh whole pages, consecutive within each page. Returns None and changes
        nothing when not enough pages are free.
        """
        if n < 0 or prev_len < 0:
            raise ValueError(f"bad alloc_extend(prev_len={prev_len}, n={n})")
        P = self.page_size
        used = prev_len % P
        tail: list[int] = []
        if used and n:
            if last_slot is None or last_slot % P != used - 1:
                raise ValueError(f"last_slot={last_slot} does not end a sequence of {prev_len}")
            if self._is_free[last_slot // P]:
                raise LedgerError(f"slot {last_slot}: extended but its page is free")
            tail = list(range(last_slot + 1, last_slot + 1 + min(n, P - used)))
        rest = n - len(tail)
        need = -(-rest // P)
        if need > len(self._free_pages):
            return None
        out = tail
        for _ in range(need):
            page = self._free_pages.pop()
            self._is_free[page] = 0
            out.extend(range(page * P, page * P + P))
        del out[n:]
        return out

    def take_pages(self, k: int) -> list[int] | None:
        """k free pages, in the order k calls of alloc would hand them out; None (nothing changed) when
        fewer are free."""
        if k > len(self._free_pages):
            return None
        if k <= 0:
            return []
        pages = self._free_pages[-k:]
        del self._free_pages[-k:]
        pages.reverse()
        for page in pages:
            self._is_free[page] = 0
        return pages

    def free(self, slots: Iterable[int]) -> None:
        """Return the distinct pages of `slots` to the pool.

        Raises LedgerError, changing nothing, if a slot is out of range, named twice, or its
        page is already free.
        """
        P = self.page_size
        seen: set[int] = set()
        pages: dict[int, None] = {}  # distinct pages, in order
        for s in slots:
            if not 0 <= s < self.total:
                raise LedgerError(f"slot {s}: freed but out of range 0..{self.total - 1}")
            if s in seen:
                raise LedgerError(f"slot {s}: freed twice in one call")
            seen.add(s)
            page = s // P
            if self._is_free[page]:
                raise LedgerError(f"slot {s}: double free (page {page} is already free)")
            pages[page] = None
        for page in pages:
            self._is_free[page] = 1
            self._free_pages.append(page)

    def free_slots(self) -> list[int]:
        """Every free slot, ascending."""
        P = self.page_size
        return [s for page in sorted(self._free_pages) for s in range(page * P, page * P + P)]
