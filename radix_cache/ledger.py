"""The KV-slot ledger: every slot is free, owned by the tree, or held by one running request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    from radixlm.radix_cache.allocator import SlotAllocator
    from radixlm.radix_cache.radix_tree import RadixCache

MAX_REPORTED = 8


class LedgerError(Exception):
    """A KV slot is in no state or in two states at once (a leak, a double free, a double owner)."""


def check_ledger(
    allocator: SlotAllocator, tree: RadixCache, held: Mapping[str, Iterable[int]]
) -> None:
    """Prove that each slot 0..total-1 is in exactly one state; raise LedgerError otherwise.

    States: free in `allocator`, owned by `tree`, or held by one request (`held` maps a request
    id to the slots it allocated and has not given to the tree). A slot named twice, even by the
    same owner, is an error. With page_size P > 1 ownership is per page: a request may name
    only part of its last page, but a page must not be claimed by two owners, and a page nobody
    names is leaked. The message names the first offending slots, e.g.
    "slot 17: free and held by req r3".
    """
    total, P = allocator.total, allocator.page_size
    sources: list[tuple[str, Iterable[int]]] = [
        ("free", allocator.free_slots()),
        ("in tree", tree.all_slots()),
        *((f"held by req {rid}", slots) for rid, slots in held.items()),
    ]
    slot_owner: list[str | None] = [None] * total
    page_owner: list[str | None] = [None] * (total // P)
    problems: list[tuple[int, str]] = []
    for who, slots in sources:
        for s in slots:
            if not 0 <= s < total:
                problems.append((s, f"slot {s}: {who} but out of range 0..{total - 1}"))
                continue
            first = slot_owner[s]
            if first is not None:
                problems.append((s, f"slot {s}: {first} and {who}"))
                continue
            slot_owner[s] = who
            page = s // P
            if page_owner[page] is None:
                page_owner[page] = who
            elif page_owner[page] != who:
                problems.append((s, f"slot {s}: {who} but page {page} is {page_owner[page]}"))
    for page, who in enumerate(page_owner):
        if who is None:
            s = page * P
            where = f"slot {s}" if P == 1 else f"slots {s}..{s + P - 1}"
            problems.append((s, f"{where}: leaked (not free, not in tree, not held)"))
    if problems:
        problems.sort(key=lambda p: p[0])
        shown = "; ".join(msg for _, msg in problems[:MAX_REPORTED])
        more = f" (+{len(problems) - MAX_REPORTED} more)" if len(problems) > MAX_REPORTED else ""
        raise LedgerError(f"KV ledger broken, {len(problems)} problem(s): {shown}{more}")
