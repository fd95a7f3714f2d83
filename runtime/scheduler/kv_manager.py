"""KV bookkeeping for requests: prefix match and lock, slot allocation with eviction, caching.

The glue between Req, the radix tree and the slot allocator.  No torch: the model runner copies
req.kv_slots into the req_to_token table when it builds a batch.
"""

import logging

from radixlm.radix_cache.allocator import SlotAllocator
from radixlm.radix_cache.ledger import check_ledger
from radixlm.radix_cache.radix_tree import MatchResult, RadixCache, common_prefix_len
from radixlm.radix_cache.state_snapshots import StateSnapshots

logger = logging.getLogger(__name__)
CACHE_POINT_MIN = 32   # a recurrent-state model's prefill stops to keep its state where it leaves a cached path
                       # at least this many tokens past the last snapshot (the next prompt sharing it hits there)


class KVManager:
    def __init__(self, num_slots: int, num_rows: int, page_size: int = 1, disable_radix_cache: bool = False,
                 state_slots=()):
        """state_slots: for a model with a recurrent state per request row, the runner's snapshot slots
        (radix_cache/state_snapshots.py); a cached prefix is then usable only up to a node holding a snapshot."""
        self.page_size = page_size
        # an automatic KV budget is any number of slots: use its whole pages (the rest stays unused)
        self.allocator = SlotAllocator(num_slots - num_slots % page_size, page_size)
        self.tree = RadixCache(page_size=page_size, disable=disable_radix_cache)
        self.free_rows = list(range(num_rows - 1, -1, -1))
        self.num_rows = num_rows
        self.on_insert = None          # called with each request whose computed tokens entered the tree
        self.states = StateSnapshots(state_slots) if state_slots and not disable_radix_cache else None

    # ---- capacity ----
    def available(self) -> int:
        """Slots that can be had now, counting what eviction can free."""
        return self.allocator.available() + self.tree.evictable_size()

    def has_row(self) -> bool:
        return bool(self.free_rows)

    # ---- admission ----
    def match(self, req):
        """Longest usable cached prefix of req.fill_ids in req.cache_namespace: (usable_len, MatchResult).

        At least one token is always left to compute (its logits give the next token), and when input
        logprobs are asked from logprob_start_len the match stops there (cached tokens have no logits).
        The policy's match of this step (req.prefix_match) is used when its node is still in the
        tree: within a step the tree only loses leaves to eviction (a split keeps the path's slots),
        so a node that is not removed still ends exactly at the matched prefix.
        """
        m, req.prefix_match = req.prefix_match, None
        if m is None or m.node.removed:
            m = self.tree.match_prefix(req.fill_ids, req.cache_namespace)
        limit = req.seq_len - 1
        if req.return_logprob and req.logprob_start_len >= 0 and not req.prefill_done:
            limit = min(limit, req.logprob_start_len - 1)
        usable = min(m.length, max(0, limit))
        usable -= usable % self.page_size
        if self.states is not None:
            return self._state_match(req, m, usable)
        return usable, m

    def _state_match(self, req, m, usable):
        """The deepest node of m's path within `usable` tokens that holds a state snapshot, and whether the
        prefill should stop at `usable` to keep one there (req.cache_point)."""
        node, end = m.node, m.length
        while node.parent is not None and (end > usable or node.state is None):
            end -= len(node.key)
            node = node.parent
        req.cache_point = usable if usable - end >= CACHE_POINT_MIN else None
        return end, MatchResult(m.slots[:end], node)

    def share_point(self, req, usable: int, others) -> None:
        """A recurrent-state model's prompt that others waiting share past its cached part (a burst of users of
        one system prompt, n > 1 samples of one prompt) stops where they part, to keep a state snapshot there:
        they then start from it instead of computing the shared part once more each."""
        if self.states is None or req.cache_point is not None:
            return
        ids, limit = req.fill_ids, req.seq_len - 1
        shared = max((common_prefix_len(ids, o.fill_ids) for o in others
                      if o.cache_namespace == req.cache_namespace), default=0)
        point = min(shared, limit)
        point -= point % self.page_size
        if point - usable >= CACHE_POINT_MIN:
            req.cache_point = point

    def extend_cap(self, req, start: int, n: int) -> int:
        """n new tokens from `start`, or fewer where the request's prefill must stop at its cache point."""
        point = req.cache_point
        if point is None or point <= start:
            req.cache_point = None
            return n
        return min(n, point - start)

    def take_state_copies(self) -> list:
        """The state copies the runner must make before the next forward (state_snapshots.py), in order."""
        return self.states.take_copies() if self.states is not None else []

    def admit(self, req, usable, match) -> None:
        """Lock the matched prefix and give req a table row.  Caller checked has_row()."""
        req.row = self.free_rows.pop()
        req.table_len = 0
        req.kv_slots = list(match.slots[:usable])
        req.cached_len = usable
        req.last_node = match.node
        self.tree.inc_lock_ref(match.node)
        if usable:
            self.tree.record_hit(match.node)
            if self.states is not None:
                self.states.load(match.node, req.row)

    def alloc(self, req, n: int) -> bool:
        """Append slots for n new tokens to req.kv_slots, evicting from the tree if needed."""
        if n <= 0:
            return True
        last = req.kv_slots[-1] if req.kv_slots else None
        slots = self.allocator.alloc_extend(len(req.kv_slots), last, n)
        if slots is None:
            freed = self.tree.evict(n + self.page_size)
            if freed:
                self.allocator.free(freed)
            slots = self.allocator.alloc_extend(len(req.kv_slots), last, n)
        if slots is None:
            return False
        req.kv_slots.extend(slots)
        return True

    def alloc_decodes(self, reqs) -> bool:
        """One slot more for each of reqs, all or none: a request at a page boundary takes a fresh page,
        the others the next slot of their last page.  False (nothing changed) when the free pages fall
        short; alloc() then evicts and gives out what there is, request by request."""
        P = self.page_size
        if P == 1:
            pages = self.allocator.take_pages(len(reqs))
            if pages is None:
                return False
            for req, slot in zip(reqs, pages):
                req.kv_slots.append(slot)
            return True
        at_boundary = [len(req.kv_slots) % P == 0 for req in reqs]
        pages = self.allocator.take_pages(sum(at_boundary))
        if pages is None:
            return False
        fresh = iter(pages)
        for req, new_page in zip(reqs, at_boundary):
            req.kv_slots.append(next(fresh) * P if new_page else req.kv_slots[-1] + 1)
        return True

    def trim(self, req, n: int) -> None:
        """Keep the first n slots (drop the KV of rejected draft tokens, or of a token that forced text
        replaced); the pages past the one holding slot n - 1 go back."""
        if n < req.cached_len:
            raise ValueError(f"cannot trim {req.rid} to {n} slots: its first {req.cached_len} belong to the tree")
        if n < len(req.kv_slots):
            whole = n + -n % self.page_size
            if whole < len(req.kv_slots):
                self.allocator.free(req.kv_slots[whole:])
            del req.kv_slots[n:]
            req.table_len = min(req.table_len, n)

    # ---- caching ----
    def cache_unfinished(self, req, limit: int = None) -> None:
        """Put req's computed tokens (the first `limit` at most) into the tree (others can share them now);
        req keeps running."""
        self._insert(req, limit)

    def release(self, req, cache: bool = True) -> None:
        """Request leaves the running set: optionally cache its computed tokens, free what it holds."""
        if req.row is None:
            return
        if cache:
            self._insert(req)
        if req.held_slots:
            self.allocator.free(req.held_slots)
        self.tree.dec_lock_ref(req.last_node)
        self.free_rows.append(req.row)
        req.row, req.last_node, req.kv_slots, req.cached_len, req.table_len = None, None, [], 0, 0
        req.cache_point = None

    def _insert(self, req, limit: int = None) -> None:
        computed = req.computed_len if limit is None else min(limit, req.computed_len)
        ids = req.fill_ids[:computed]
        present = self.tree.insert(ids, req.kv_slots[:computed], req.cache_namespace)
        if present > req.cached_len:
            self.allocator.free(req.kv_slots[req.cached_len:present])
        m = self.tree.match_prefix(ids, req.cache_namespace)
        if m.length < req.cached_len:
            raise RuntimeError(f"radix tree lost a locked prefix of {req.rid}")
        old_cached = req.cached_len
        req.kv_slots[:m.length] = m.slots
        self.tree.dec_lock_ref(req.last_node)
        self.tree.inc_lock_ref(m.node)
        req.last_node, req.cached_len = m.node, m.length
        req.table_len = min(req.table_len, old_cached)
        if self.states is not None and 0 < m.length == req.computed_len:   # the row's state ends at m.node
            self.states.save(m.node, req.row)
        if self.on_insert is not None:
            self.on_insert(req)

    # ---- maintenance ----
    def flush(self) -> bool:
        """Drop every cached prefix; refused (False) while any request holds a lock."""
        if self.tree.protected_size() > 0:
            return False
        self.allocator.free(self.tree.flush())
        return True

    def check(self, running) -> None:
        """Ledger: every slot free, owned by the tree, or held by exactly one running request."""
        check_ledger(self.allocator, self.tree, {r.rid: r.held_slots for r in running})

    def stats(self) -> dict:
        total = self.allocator.total
        return {
            "max_total_num_tokens": total,
            "free_slots": self.allocator.available(),
            "tree_slots": self.tree.total_size(),
            "evictable_slots": self.tree.evictable_size(),
            "used_slots": total - self.allocator.available(),
            "page_size": self.page_size,
        }
