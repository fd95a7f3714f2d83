"""The slot ledger under a scheduler-like random workload, and that it catches broken books."""

from dataclasses import dataclass

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from radixlm.radix_cache.allocator import SlotAllocator
from radixlm.radix_cache.ledger import LedgerError, check_ledger
from radixlm.radix_cache.radix_tree import RadixCache, TreeNode

TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=14)


@dataclass
class Req:
    tokens: list[int]
    slots: list[int]  # slots[:cached] belong to the tree, the rest the request allocated
    cached: int
    node: TreeNode  # locked while the request runs


class SchedulerMachine(RuleBasedStateMachine):
    """Requests arrive, decode, finish, retract, abort; the cache evicts and flushes."""

    @initialize(P=st.sampled_from([1, 2, 4]))
    def setup(self, P):
        self.P = P
        self.alloc, self.tree = SlotAllocator(24, P), RadixCache(P)
        self.reqs: dict[str, Req] = {}
        self.pins: list[TreeNode] = []  # extra locks without slots (e.g. a prefix being read)
        self.next_id = 0

    def _alloc(self, prev_len, last_slot, n):
        """alloc_extend, evicting from the tree once if the pool is short."""
        out = self.alloc.alloc_extend(prev_len, last_slot, n)
        if out is None:
            self.alloc.free(self.tree.evict(n + self.P))
            out = self.alloc.alloc_extend(prev_len, last_slot, n)
            event("evicted under memory pressure" if out else "rejected: pool full")
        return out

    def _release(self, rid, computed):
        """Give tokens[:computed] to the tree, free duplicates and the rest, unlock."""
        r = self.reqs.pop(rid)
        present = self.tree.insert(r.tokens[:computed], r.slots[:computed])
        assert present >= r.cached  # the locked prefix cannot have gone
        stored = computed // self.P * self.P
        self.alloc.free(r.slots[r.cached : present] + r.slots[stored:])
        self.tree.dec_lock_ref(r.node)

    @rule(tokens=TOKENS)
    def arrive(self, tokens):
        m = self.tree.match_prefix(tokens)
        self.tree.inc_lock_ref(m.node)
        own = self._alloc(m.length, m.slots[-1] if m.slots else None, len(tokens) - m.length)
        if own is None:
            self.tree.dec_lock_ref(m.node)
            return
        event("arrive with cache hit" if m.length else "arrive without cache hit")
        self.reqs[f"r{self.next_id}"] = Req(tokens, m.slots + own, m.length, m.node)
        self.next_id += 1

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), new=st.lists(st.integers(0, 2), min_size=1, max_size=5))
    def decode(self, data, new):
        r = self.reqs[data.draw(st.sampled_from(sorted(self.reqs)))]
        own = self._alloc(len(r.tokens), r.slots[-1], len(new))
        if own is not None:
            r.tokens, r.slots = r.tokens + new, r.slots + own

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def finish(self, data):
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        self._release(rid, len(self.reqs[rid].tokens))

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def retract(self, data):
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        r = self.reqs[rid]
        self._release(rid, data.draw(st.integers(r.cached, len(r.tokens))))

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def abort(self, data):
        r = self.reqs.pop(data.draw(st.sampled_from(sorted(self.reqs))))
        self.tree.dec_lock_ref(r.node)
        self.alloc.free(r.slots[r.cached :])

    @rule(tokens=TOKENS)
    def pin(self, tokens):
        node = self.tree.match_prefix(tokens).node
        self.tree.inc_lock_ref(node)
        self.pins.append(node)

    @precondition(lambda self: self.pins)
    @rule(data=st.data())
    def unpin(self, data):
        self.tree.dec_lock_ref(self.pins.pop(data.draw(st.integers(0, len(self.pins) - 1))))

    @rule(k=st.integers(1, 20))
    def evict(self, k):
        self.alloc.free(self.tree.evict(k))

    @rule()
    def flush(self):
        if self.tree.protected_size():
            with pytest.raises(RuntimeError):
                self.tree.flush()
        else:
            self.alloc.free(self.tree.flush())
            assert self.tree.num_nodes() == 0

    @invariant()
    def books_balance(self):
        if not hasattr(self, "tree"):
            return
        held = {rid: r.slots[r.cached :] for rid, r in self.reqs.items()}
        check_ledger(self.alloc, self.tree, held)
        t = self.tree
        assert t.evictable_size() + t.protected_size() == t.total_size() == len(t.all_slots())


SchedulerMachine.TestCase.settings = settings(
    max_examples=12, stateful_step_count=250, deadline=None
)
test_scheduler_machine = SchedulerMachine.TestCase


def _setup(P=1):
    alloc, tree = SlotAllocator(8, P), RadixCache(P)
    a, b = alloc.alloc(4), alloc.alloc(2)
    tree.insert([1, 2, 3, 4], a)
    check_ledger(alloc, tree, {"r3": b})
    return alloc, tree, a, b


def test_catches_leak():
    alloc, tree, a, b = _setup()
    with pytest.raises(LedgerError, match=rf"slot {b[1]}: leaked"):
        check_ledger(alloc, tree, {"r3": b[:1]})


def test_catches_double_owner():
    alloc, tree, a, b = _setup()
    with pytest.raises(LedgerError, match=rf"slot {a[0]}: in tree and held by req r3"):
        check_ledger(alloc, tree, {"r3": b + a[:1]})
    alloc.free(b[:1])
    with pytest.raises(LedgerError, match=rf"slot {b[0]}: free and held by req r3"):
        check_ledger(alloc, tree, {"r3": b})
    with pytest.raises(LedgerError, match="held by req r3 and held by req r4"):
        check_ledger(alloc, tree, {"r3": b[1:], "r4": b[1:]})
    with pytest.raises(LedgerError, match="out of range"):
        check_ledger(alloc, tree, {"r3": b[1:] + [99]})


def test_pages_are_owned_whole():
    alloc, tree = SlotAllocator(8, 2), RadixCache(2)
    x = alloc.alloc(3)  # pages 0 and 1; slot 3 is unused but belongs to the request
    check_ledger(alloc, tree, {"r1": x})
    with pytest.raises(LedgerError, match="slot 2: held by req r2 but page 1 is held by req r1"):
        check_ledger(alloc, tree, {"r1": x[:2] + [3], "r2": [2]})
    with pytest.raises(LedgerError, match="slots 2..3: leaked"):
        check_ledger(alloc, tree, {"r1": x[:2]})
