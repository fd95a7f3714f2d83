"""RadixCache namespaces (extra_key / cache_salt): one brute-force dict per namespace is the oracle;
slots are handed out by the real allocator and the ledger (free + tree + held == total) is proved
after every operation."""

import random

import pytest

from radixlm.radix_cache.allocator import SlotAllocator
from radixlm.radix_cache.ledger import check_ledger
from radixlm.radix_cache.radix_tree import RadixCache

NAMESPACES = [None, "a", "b", "0:|x"]


def _prefix_oracle(stored: dict, key) -> int:
    n = 0
    for e in range(1, len(key) + 1):
        if tuple(key[:e]) not in stored:
            break
        n = e
    return n


def test_same_key_in_two_namespaces_shares_nothing():
    tree = RadixCache()
    tree.insert([1, 2, 3], [10, 11, 12], namespace="alice")
    assert tree.match_prefix([1, 2, 3], namespace="alice").slots == [10, 11, 12]
    assert tree.match_prefix([1, 2, 3], namespace="bob").length == 0
    assert tree.match_prefix([1, 2, 3]).length == 0                 # the shared namespace neither
    assert tree.insert([1, 2, 3], [20, 21, 22], namespace="bob") == 0  # bob stores his own copy
    assert tree.match_prefix([1, 2], namespace="bob").slots == [20, 21]
    assert sorted(tree.all_slots()) == [10, 11, 12, 20, 21, 22]


def test_emptied_namespace_is_dropped_and_locks_hold():
    tree = RadixCache()
    tree.insert([5, 6], [0, 1], namespace="k")
    m = tree.match_prefix([5, 6], namespace="k")
    tree.inc_lock_ref(m.node)
    assert tree.evict(10) == []                                      # locked: nothing evictable
    tree.dec_lock_ref(m.node)
    assert sorted(tree.evict(10)) == [0, 1]
    assert tree.num_namespaces() == 1 and tree.match_prefix([5, 6], namespace="k").length == 0


@pytest.mark.parametrize("seed", range(6))
def test_random_ops_vs_brute_force_with_ledger(seed):
    rng = random.Random(seed)
    alloc, tree = SlotAllocator(64), RadixCache()
    stored = {ns: {} for ns in NAMESPACES}          # ns -> {prefix tuple: slot of its last token}
    held: dict = {}                                  # "req" -> (node, ns, slots it allocated)
    for step in range(300):
        ns, key = rng.choice(NAMESPACES), [rng.randint(0, 2) for _ in range(rng.randint(1, 6))]
        op = rng.random()
        if op < 0.5:
            m = tree.match_prefix(key, ns)
            assert m.length == _prefix_oracle(stored[ns], key), (step, ns, key)
            assert m.slots == [stored[ns][tuple(key[:e])] for e in range(1, m.length + 1)]
            new = alloc.alloc(len(key) - m.length)
            if new is None:
                freed = tree.evict(len(key))
                alloc.free(freed)
                for space in stored.values():   # drop evicted prefixes from the oracle
                    for p in [p for p, s in space.items() if s in set(freed)]:
                        del space[p]
                continue
            slots = m.slots + new
            present = tree.insert(key, slots, ns)
            assert present == m.length
            for e in range(1, len(key) + 1):
                stored[ns].setdefault(tuple(key[:e]), slots[e - 1])
        elif op < 0.7 and not held:
            m = tree.match_prefix(key, ns)
            tree.inc_lock_ref(m.node)
            held["req"] = m.node
        elif op < 0.85 and held:
            tree.dec_lock_ref(held.pop("req"))
        else:
            freed = tree.evict(rng.randint(1, 8))
            alloc.free(freed)
            gone = set(freed)
            for space in stored.values():
                for p in [p for p, s in space.items() if s in gone]:
                    del space[p]
        check_ledger(alloc, tree, {})
        owners = [s for space in stored.values() for s in space.values()]
        assert sorted(owners) == sorted(tree.all_slots())               # no slot in two namespaces
