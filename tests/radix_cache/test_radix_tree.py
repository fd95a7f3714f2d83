"""RadixCache against a brute-force dict of every stored prefix -> slot."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from radixlm.radix_cache.radix_tree import RadixCache

# Pages that share leading tokens, so matches also stop inside a page.
PAGES = {1: [[0], [1], [2]], 4: [[0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0], [1, 1, 1, 1]]}


def keys(P: int) -> st.SearchStrategy:
    pages = st.lists(st.sampled_from(PAGES[P]), max_size=8 if P == 1 else 5)
    tail = st.lists(st.integers(0, 1), max_size=P - 1)
    return st.tuples(pages, tail).map(lambda t: [x for page in t[0] for x in page] + t[1])


class Model:
    """Every stored page-aligned prefix (tuple) -> the slots of its last page; last touch times.

    The tree shares KV only in whole pages, so the brute force is keyed by page-aligned prefixes.
    """

    def __init__(self, P: int):
        self.P, self.slot, self.time = P, {}, {}

    def pages(self, key) -> list[tuple]:
        return [tuple(key[:e]) for e in range(self.P, len(key) + 1, self.P)]

    def present(self, key) -> int:
        n = 0
        for p in self.pages(key):
            if p not in self.slot:
                break
            n = len(p)
        return n

    def insert(self, key, slots, t) -> int:
        n = self.present(key)
        for p in self.pages(key):
            self.slot.setdefault(p, list(slots[len(p) - self.P : len(p)]))
            self.time[p] = t
        return n

    def match(self, key, t) -> list[int]:
        out = []
        for p in self.pages(key[: self.present(key)]):
            self.time[p] = t
            out += self.slot[p]
        return out

    def all_slots(self) -> list[int]:
        return [s for page in self.slot.values() for s in page]


def path_of(node):
    """Tokens and slots from the root down to node."""
    key, value = [], []
    while node.parent is not None:
        key[:0], value[:0] = node.key, node.value
        node = node.parent
    return key, value


def walk(tree: RadixCache):
    """(node, its full prefix as a tuple) for every node but the root."""
    stack = [(c, tuple(c.key)) for c in tree.root.children.values()]
    while stack:
        node, prefix = stack.pop()
        yield node, prefix
        stack.extend((c, prefix + tuple(c.key)) for c in node.children.values())


def check_same(tree: RadixCache, model: Model):
    slots = tree.all_slots()
    assert len(slots) == len(set(slots)) == len(model.all_slots()) == tree.total_size()
    assert set(slots) == set(model.all_slots())


@pytest.mark.parametrize("P", [1, 4])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_insert_and_match_vs_brute_force(P, data):
    tree, model, nxt = RadixCache(P), Model(P), 0
    for t in range(data.draw(st.integers(1, 12))):
        key = data.draw(keys(P))
        if data.draw(st.booleans()):
            slots = list(range(nxt, nxt + len(key)))
            nxt += len(key)
            assert tree.insert(key, slots) == model.insert(key, slots, t)
        else:
            nodes, times = tree.num_nodes(), [n.last_access for n, _ in walk(tree)]
            peek = tree.prefix_len(key)       # read only: no split, no touch
            assert (tree.num_nodes(), [n.last_access for n, _ in walk(tree)]) == (nodes, times)
            r = tree.match_prefix(key)
            assert r.slots == model.match(key, t)
            assert path_of(r.node) == (list(key[: r.length]), r.slots)
            assert peek == r.length
        check_same(tree, model)
    for prefix in model.slot:  # everything stored is found again
        assert tree.match_prefix(prefix).length == len(prefix)


class TreeMachine(RuleBasedStateMachine):
    """Inserts, matches, locks and evictions; eviction checked against LRU on the model."""

    @initialize(P=st.sampled_from([1, 4]))
    def setup(self, P):
        self.P, self.tree, self.model = P, RadixCache(P), Model(P)
        self.locks: list = []  # (node, locked prefix)
        self.t = self.nxt = 0

    @rule(data=st.data())
    def insert(self, data):
        key = data.draw(keys(self.P))
        slots = list(range(self.nxt, self.nxt + len(key)))
        self.nxt, self.t = self.nxt + len(key), self.t + 1
        assert self.tree.insert(key, slots) == self.model.insert(key, slots, self.t)

    @rule(data=st.data(), lock=st.booleans())
    def match(self, data, lock):
        key = data.draw(keys(self.P))
        self.t += 1
        r = self.tree.match_prefix(key)
        assert r.slots == self.model.match(key, self.t)
        assert path_of(r.node) == (list(key[: r.length]), r.slots)
        if lock:
            self.tree.inc_lock_ref(r.node)
            self.locks.append((r.node, tuple(key[: r.length])))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        i = data.draw(st.integers(0, len(self.locks) - 1))
        self.tree.dec_lock_ref(self.locks.pop(i)[0])

    @rule(k=st.integers(0, 12))
    def evict(self, k):
        got = self.tree.evict(k)
        m, pos = self.model, 0
        while pos < len(got):
            assert pos < k, "evicted past the target"
            leaves = self.unlocked_leaves()
            assert leaves, "evicted a locked or inner prefix"
            victim = min(leaves, key=m.time.__getitem__)
            last = m.slot[victim][-1]
            assert last in got[pos:], f"LRU leaf {victim} not evicted next: {got}"
            end = got.index(last, pos) + 1
            start = len(victim) - (end - pos)
            chain = [victim[:e] for e in range(start + self.P, len(victim) + 1, self.P)]
            assert start % self.P == 0 and got[pos:end] == [s for p in chain for s in m.slot[p]]
            for p in chain:
                del m.slot[p], m.time[p]
            pos = end
        if len(got) < k:
            assert not self.unlocked_leaves() and self.tree.evictable_size() == 0

    @rule()
    def flush(self):
        if self.locked():  # a lock on the root (empty match) locks nothing
            with pytest.raises(RuntimeError):
                self.tree.flush()
        else:
            assert sorted(self.tree.flush()) == sorted(self.model.all_slots())
            self.model = Model(self.P)

    def locked(self) -> set:
        return {q for _, p in self.locks for q in self.model.pages(p)}

    def unlocked_leaves(self) -> list:
        inner = {p[: -self.P] for p in self.model.slot}
        locked = self.locked()
        return [p for p in self.model.slot if p not in inner and p not in locked]

    @invariant()
    def consistent(self):
        if not hasattr(self, "tree"):
            return
        check_same(self.tree, self.model)
        for node, prefix in walk(self.tree):  # lock_ref == number of locks below or at node
            assert node.lock_ref == sum(p[: len(prefix)] == prefix for _, p in self.locks)
        assert all(p[: -self.P] in self.model.slot for p in self.model.slot if len(p) > self.P)
        assert self.tree.protected_size() == self.P * len(self.locked())
        assert self.tree.evictable_size() == self.P * (len(self.model.slot) - len(self.locked()))


TreeMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
test_tree_machine = TreeMachine.TestCase


def test_lru_order_and_locks_simple():
    tree = RadixCache()
    tree.insert([1, 1], [10, 11])
    tree.insert([2, 2], [20, 21])
    tree.insert([3, 3], [30, 31])
    tree.match_prefix([1, 1])  # now [2, 2] is the least recently used
    locked = tree.match_prefix([3, 3, 9]).node
    tree.inc_lock_ref(locked)
    assert tree.evict(1) == [20, 21]
    assert tree.evict(100) == [10, 11]  # [3, 3] is locked
    assert tree.match_prefix([3, 3]).slots == [30, 31] and tree.match_prefix([1]).length == 0
    tree.dec_lock_ref(locked)
    with pytest.raises(RuntimeError):
        tree.dec_lock_ref(locked)
    assert tree.evict(1) == [30, 31] and tree.num_nodes() == 0


def test_split_keeps_locks():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], [0, 1, 2, 3])
    node = tree.match_prefix([1, 2, 3, 4]).node
    tree.inc_lock_ref(node)
    assert tree.match_prefix([1, 2]).node.lock_ref == 1  # split inside the locked node
    assert tree.evict(10) == [] and tree.protected_size() == 4
    tree.dec_lock_ref(node)
    assert tree.evictable_size() == 4 and tree.protected_size() == 0
    assert tree.evict(1) == [2, 3]


def test_split_and_parent_becomes_leaf():
    tree = RadixCache()
    assert tree.insert([1, 2, 3, 4], [0, 1, 2, 3]) == 0
    r = tree.match_prefix([1, 2, 9])
    assert r.slots == [0, 1] and r.node.key == [1, 2] and tree.num_nodes() == 2
    assert tree.insert([1, 2, 3, 4, 5], [7, 7, 7, 7, 4]) == 4
    assert tree.insert([1, 2], [8, 8]) == 2
    assert tree.evict(1) == [4] and tree.evict(1) == [2, 3] and tree.evict(1) == [0, 1]
    with pytest.raises(ValueError):
        tree.insert([1, 2], [0])
    with pytest.raises(ValueError):
        tree.inc_lock_ref(r.node)  # evicted


def test_page_size_rounds_down():
    tree = RadixCache(page_size=4)
    assert tree.insert([1, 2, 3, 4, 5, 6], list(range(6))) == 0
    assert tree.all_slots() == [0, 1, 2, 3]  # the ragged tail stays with the caller
    assert tree.match_prefix([1, 2, 3, 4, 5]).length == 4
    assert tree.match_prefix([1, 2, 3, 9]).length == 0  # partial page does not count


def test_disabled():
    tree = RadixCache(disable=True)
    assert tree.insert([1, 2], [5, 6]) == 0
    r = tree.match_prefix([1, 2])
    assert r.length == 0 and r.node is tree.root
    tree.inc_lock_ref(r.node)
    tree.dec_lock_ref(r.node)
    assert tree.evict(10) == [] and tree.flush() == [] and tree.total_size() == 0


def test_heap_stays_bounded():
    """Repeated hits push lazy heap entries; they must be compacted, not accumulate."""
    tree = RadixCache()
    for i in range(10):
        tree.insert([i, i], [2 * i, 2 * i + 1])
    for _ in range(2000):
        tree.match_prefix([3, 3])
    assert len(tree._heap) <= 2 * tree.num_nodes() + 65
    assert tree.evict(2) == [0, 1]
