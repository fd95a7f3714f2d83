"""Radix tree of token-id prefixes whose values are KV slot indices (no torch)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Iterator, Sequence


class TreeNode:
    """One edge of the tree: `key` tokens whose KV lives in `value` slots (same length)."""

    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access", "removed", "hits", "state")

    def __init__(self, key: list[int], value: list[int], parent: TreeNode | None, last_access: int):
        self.children: dict[object, TreeNode] = {}
        self.parent = parent
        self.key = key
        self.value = value
        self.lock_ref = 0
        self.last_access = last_access
        self.removed = False  # evicted or flushed; such a node must not be locked again
        self.hits = 0         # admitted requests that reused this node's tokens (record_hit)
        self.state = None     # the snapshot of a recurrent state after this node's last token (state_snapshots.py)

    def __repr__(self) -> str:
        return f"TreeNode(key={_short(self.key)}, lock_ref={self.lock_ref}, t={self.last_access})"


@dataclass
class MatchResult:
    """The longest cached prefix: its slots, and the node that ends exactly at it (root if none)."""

    slots: list[int]
    node: TreeNode

    @property
    def length(self) -> int:
        return len(self.slots)


class RadixCache:
    """Prefix cache from token ids to KV slots, with LRU eviction of unlocked leaves.

    Contract:
    - Keys are matched and stored in whole pages of `page_size` tokens (a key's ragged tail is
      ignored). The tree owns the slots of every stored token; `evict` and `flush` hand them
      back, and the caller frees them in the allocator.
    - `match_prefix` and `insert` mutate (they split nodes and refresh last-access times).
    - A running request locks its matched node with `inc_lock_ref` and unlocks it exactly once
      with `dec_lock_ref`; locked nodes (and so their ancestors) are never evicted or flushed.
    - `evict` pops least-recently-used unlocked leaves from a lazily invalidated heap, so it
      costs O(k log n) for k removed nodes; stale entries are dropped when the heap doubles.
    - `disable=True` keeps the same API but stores nothing: matches are empty, insert returns 0.
    - `namespace` (match_prefix, insert): each namespace is a separate tree under its own root
      (None: the shared one), so keys of different namespaces never share a node nor a slot;
      eviction is global LRU over all of them, and a namespace whose tree empties is dropped.
    - Sizes are O(1) counters; `num_nodes` does not count the root.
    - `on_evict` (None, or a callable): called with each node `evict` removes, before its slots are
      handed back, while its ancestors are still in the tree (the KV tiers copy its KV out there);
      `node_prefix(node)` gives its namespace and every token (and slot) from the root to its end.
    """

    def __init__(self, page_size: int = 1, disable: bool = False):
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.disable = disable
        self._clock = 0
        self._seq = itertools.count()
        self.on_evict = None
        self._reset()

    def _reset(self) -> None:
        self.root = TreeNode([], [], None, 0)
        self._roots: dict[object, TreeNode] = {None: self.root}
        self._heap: list[tuple[int, int, TreeNode]] = []
        self._evictable = 0
        self._protected = 0
        self._num_nodes = 0

    # ---- queries -------------------------------------------------------------------------

    def match_prefix(self, key: Sequence[int], namespace: object = None) -> MatchResult:
        """Longest cached prefix of `key` in whole pages within `namespace`; touches its path (LRU).

        Splits the last node when the match ends inside it, so `node` covers exactly the match (a
        root when nothing matches: locking a root is a no-op).
        """
        root = self._roots.get(namespace)
        if self.disable or root is None:
            return MatchResult([], self.root)
        key = self._aligned(key)
        self._clock += 1
        node, pos, slots = root, 0, []
        while pos < len(key):
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                break
            n = self._match_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            self._touch(child)
            slots.extend(child.value)
            node, pos = child, pos + n
        return MatchResult(slots, node)

    def prefix_len(self, key: Sequence[int], namespace: object = None) -> int:
        """match_prefix(key, namespace).length, read only: no split, no LRU touch (a router's peek)."""
        root = self._roots.get(namespace)
        if self.disable or root is None:
            return 0
        key = self._aligned(key)
        node, pos = root, 0
        while pos < len(key):
            child = node.children.get(self._child_key(key, pos))
            if child is None:
                break
            n = self._match_len(child.key, key, pos)
            pos += n
            if n < len(child.key):
                break
            node = child
        return pos

    def continuation(self, key: Sequence[int], k: int, namespace: object = None) -> list[int]:
        """Up to k cached tokens that follow `key` when all of `key` is cached (a speculative draft),
        taking the most recently used branch at each fork; [] otherwise. Read only, like prefix_len."""
        root = self._roots.get(namespace)
        if self.disable or root is None or k <= 0 or self.page_size != 1:
            return []
        node, pos, n = root, 0, 0
        child = None
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                return []
            n = self._match_len(child.key, key, pos)
            pos += n
            if n < len(child.key):
                if pos < len(key):
                    return []
                break
            node, child = child, None
        out = list(child.key[n:n + k]) if child is not None else []
        node = child if child is not None else node
        while len(out) < k and node.children:
            node = max(node.children.values(), key=lambda c: c.last_access)
            out.extend(node.key[:k - len(out)])
        return out

    def insert(self, key: Sequence[int], slots: Sequence[int], namespace: object = None) -> int:
        """Store `key` -> `slots` (truncated to whole pages) in `namespace`; return the length already
        present there.

        The tree takes ownership of slots[returned:len(key) // P * P]; the caller keeps the
        rest, i.e. must free its own duplicates below the returned length and its ragged tail.
        """
        if len(key) != len(slots):
            raise ValueError(f"len(key)={len(key)} != len(slots)={len(slots)}")
        if self.disable:
            return 0
        m = len(key) // self.page_size * self.page_size
        key, slots = list(key[:m]), list(slots[:m])
        if not key:
            return 0
        self._clock += 1
        if namespace not in self._roots:
            self._roots[namespace] = TreeNode([], [], None, self._clock)
        node, pos = self._roots[namespace], 0
        while pos < len(key):
            ck = self._child_key(key, pos)
            child = node.children.get(ck)
            if child is None:
                leaf = TreeNode(key[pos:], slots[pos:], node, self._clock)
                node.children[ck] = leaf
                self._num_nodes += 1
                self._evictable += len(leaf.value)
                self._push(leaf)
                return pos
            n = self._match_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            self._touch(child)
            node, pos = child, pos + n
        return pos

    def record_hit(self, node: TreeNode) -> None:
        """An admitted request reuses the tokens up to `node`: count a hit on every node of its path."""
        for n in self._path(node):
            n.hits += 1

    def node_prefix(self, node: TreeNode) -> tuple:
        """(namespace, tokens, slots): from the namespace's root to the end of `node`."""
        parts = []
        while node.parent is not None:
            parts.append(node)
            node = node.parent
        namespace = next((ns for ns, r in self._roots.items() if r is node), None)
        parts.reverse()
        return namespace, [t for n in parts for t in n.key], [s for n in parts for s in n.value]

    # ---- locks ---------------------------------------------------------------------------

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock every node from `node` up to (not including) the root."""
        for n in self._path(node):
            if n.lock_ref == 0:
                self._evictable -= len(n.value)
                self._protected += len(n.value)
            n.lock_ref += 1

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one `inc_lock_ref(node)`; RuntimeError (changing nothing) if not locked."""
        path = self._path(node)
        if any(n.lock_ref <= 0 for n in path):
            raise RuntimeError(f"dec_lock_ref below zero on {node!r}")
        for n in path:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                self._protected -= len(n.value)
                self._evictable += len(n.value)
                if not n.children:
                    self._push(n)

    # ---- freeing -------------------------------------------------------------------------

    def evict(self, num_slots: int) -> list[int]:
        """Remove LRU unlocked leaves until >= num_slots slots are removed or none is left.

        Returns the removed slots; the caller frees them in the allocator.
        """
        out: list[int] = []
        while len(out) < num_slots and self._heap:
            last_access, _, node = heapq.heappop(self._heap)
            if not self._evictable_leaf(node, last_access):
                continue
            if self.on_evict is not None:
                self.on_evict(node)
            parent = node.parent
            del parent.children[self._child_key(node.key, 0)]
            node.removed = True
            self._num_nodes -= 1
            self._evictable -= len(node.value)
            out.extend(node.value)
            if parent.parent is not None and not parent.children and parent.lock_ref == 0:
                self._push(parent)
            elif parent.parent is None and not parent.children and parent is not self.root:
                self._roots = {ns: r for ns, r in self._roots.items() if r is not parent}
        return out

    def flush(self) -> list[int]:
        """Empty the tree and return every slot it owned; RuntimeError if any node is locked."""
        if any(c.lock_ref for root in self._roots.values() for c in root.children.values()):
            raise RuntimeError("flush with locked nodes (running requests)")
        slots = []
        for node in self._nodes():
            slots.extend(node.value)
            node.removed = True
        self._reset()
        return slots

    # ---- sizes and debugging -------------------------------------------------------------

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def num_nodes(self) -> int:
        return self._num_nodes

    def roots(self) -> list[TreeNode]:
        """The root of each namespace (the shared one first)."""
        return list(self._roots.values())

    def num_namespaces(self) -> int:
        """Namespaces that hold at least one node, the shared one always counted."""
        return len(self._roots)

    def nodes(self) -> list[TreeNode]:
        """Every node but the roots, depth-first (parents before children)."""
        return list(self._nodes())

    def all_slots(self) -> list[int]:
        """Every slot owned by the tree (depth-first order)."""
        return [s for node in self._nodes() for s in node.value]

    def pretty(self) -> str:
        """One line per node, indented by depth."""
        lines, stack = [], [(c, 0) for root in reversed(self.roots()) for c in reversed(root.children.values())]
        while stack:
            node, depth = stack.pop()
            lines.append(f"{'  ' * depth}{_short(node.key)} n={len(node.value)} "
                         f"lock={node.lock_ref} t={node.last_access}")
            stack.extend((c, depth + 1) for c in reversed(node.children.values()))
        return "\n".join(lines) or "(empty)"

    # ---- internals -----------------------------------------------------------------------

    def _aligned(self, key: Sequence[int]) -> list[int]:
        if self.page_size == 1 and isinstance(key, list):
            return key  # read only: no copy
        return list(key[: len(key) // self.page_size * self.page_size])

    def _child_key(self, key: list[int], pos: int) -> object:
        return key[pos] if self.page_size == 1 else tuple(key[pos : pos + self.page_size])

    def _match_len(self, a: list[int], b: list[int], pos: int) -> int:
        """Common prefix length of a and b[pos:], in whole pages."""
        n = min(len(a), len(b) - pos)
        return _common_prefix(a, b, pos, n) // self.page_size * self.page_size

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child` after n tokens; return the new upper node (same lock and time; a state snapshot stays
        with the lower part, which still ends where it did)."""
        parent = child.parent
        upper = TreeNode(child.key[:n], child.value[:n], parent, child.last_access)
        upper.lock_ref = child.lock_ref
        upper.hits = child.hits
        parent.children[self._child_key(child.key, 0)] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[self._child_key(child.key, 0)] = child
        self._num_nodes += 1
        return upper

    def _touch(self, node: TreeNode) -> None:
        node.last_access = self._clock
        if not node.children and node.lock_ref == 0:
            self._push(node)

    def _push(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, (node.last_access, next(self._seq), node))
        if len(self._heap) > 2 * self._num_nodes + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (keeping one per evictable leaf)."""
        seen: set[int] = set()
        live = []
        for entry in self._heap:
            node = entry[2]
            if id(node) not in seen and self._evictable_leaf(node, entry[0]):
                seen.add(id(node))
                live.append(entry)
        heapq.heapify(live)
        self._heap = live

    @staticmethod
    def _evictable_leaf(node: TreeNode, last_access: int) -> bool:
        return (not node.removed and not node.children and node.lock_ref == 0
                and node.last_access == last_access)

    def _path(self, node: TreeNode) -> list[TreeNode]:
        if node.removed:
            raise ValueError(f"{node!r} is no longer in the tree")
        path = []
        while node is not self.root and node.parent is not None:
            path.append(node)
            node = node.parent
        return path

    def _nodes(self) -> Iterator[TreeNode]:
        """Every node but the root, depth-first."""
        stack = [c for root in reversed(self.roots()) for c in reversed(root.children.values())]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = min(len(a), len(b))
    return _common_prefix(list(a[:n]), list(b[:n]), 0, n)


def _common_prefix(a: list[int], b: list[int], pos: int, n: int) -> int:
    """Length of the common prefix of a[:n] and b[pos:pos + n], found with whole-slice comparisons
    (C speed): one when the slices are equal, else a binary search over prefix lengths."""
    if (a if n == len(a) else a[:n]) == b[pos : pos + n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] matches; a[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[pos + lo : pos + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _short(key: list[int], n: int = 8) -> str:
    return str(key) if len(key) <= n else f"[{', '.join(map(str, key[:n]))}, ...+{len(key) - n}]"
