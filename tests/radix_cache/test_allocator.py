"""SlotAllocator against a model of which pages each sequence owns."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.radix_cache.allocator import SlotAllocator
from radixlm.radix_cache.ledger import LedgerError


def test_round_trip_and_exhaustion():
    a = SlotAllocator(8)
    x = a.alloc(5)
    assert sorted(x) == [0, 1, 2, 3, 4] and a.available() == 3
    assert a.alloc(4) is None and a.available() == 3  # failure changes nothing
    y = a.alloc_extend(5, x[-1], 3)
    assert set(x) | set(y) == set(range(8)) and a.available() == 0
    assert a.alloc(1) is None
    assert a.alloc(0) == []
    a.free(x)
    a.free(y)
    assert a.available() == 8 and a.free_slots() == list(range(8))


def test_page_continuation_p4():
    a = SlotAllocator(16, page_size=4)
    x = a.alloc_extend(0, None, 3)
    assert x == [0, 1, 2] and a.available() == 12
    y = a.alloc_extend(3, x[-1], 6)  # slot 3 ends page 0, then pages 1 and 2
    assert y == [3, 4, 5, 6, 7, 8] and a.available() == 4
    assert a.alloc_extend(9, 8, 2) == [9, 10] and a.available() == 4  # inside page 2
    before = a.free_slots()
    assert a.alloc_extend(11, 10, 6) is None and a.free_slots() == before
    assert a.alloc_extend(11, 10, 5) == [11, 12, 13, 14, 15] and a.available() == 0
    a.free([4, 5])  # frees page 1 only
    assert a.free_slots() == [4, 5, 6, 7]
    with pytest.raises(ValueError):
        a.alloc_extend(3, 1, 1)  # slot 1 cannot hold token 2 of a sequence
    with pytest.raises(LedgerError):
        a.alloc_extend(5, 4, 1)  # page 1 is free: continuing into it would corrupt


def test_bad_sizes():
    with pytest.raises(ValueError):
        SlotAllocator(10, page_size=4)
    with pytest.raises(ValueError):
        SlotAllocator(8).alloc(-1)


@pytest.mark.parametrize("page_size", [1, 4])
def test_double_free_raises_and_changes_nothing(page_size):
    a = SlotAllocator(16, page_size)
    x = a.alloc(8)
    a.free(x[:4])
    before = a.free_slots()
    with pytest.raises(LedgerError, match="double free"):
        a.free(x)  # x[4:] is fine, x[:4] is already free
    assert a.free_slots() == before
    with pytest.raises(LedgerError):
        a.free([x[5], x[5]])
    with pytest.raises(LedgerError):
        a.free([16])
    assert a.free_slots() == before


@settings(max_examples=60, deadline=None)
@given(
    page_size=st.sampled_from([1, 2, 4]),
    ops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9)), max_size=40),
)
def test_random_sequences(page_size, ops):
    """Sequences grow and die at random; slots stay disjoint and page-aligned by position."""
    P, total = page_size, 32
    a = SlotAllocator(total, P)
    seqs: dict[int, list[int]] = {}
    for sid, n in ops:
        if sid in seqs and n == 0:
            a.free(seqs.pop(sid))
            continue
        seq = seqs.get(sid, [])
        used_pages = {s // P for v in seqs.values() for s in v}
        need = -(-(len(seq) + n) // P) - (-(-len(seq) // P))
        got = a.alloc_extend(len(seq), seq[-1] if seq else None, n)
        if need > total // P - len(used_pages):
            assert got is None
            continue
        assert got is not None and len(got) == n
        seq = seqs[sid] = seq + got
        for i, s in enumerate(seq):  # position i sits at offset i % P of its page
            assert s % P == i % P and s // P == seq[i - i % P] // P
        owned = [s // P for v in seqs.values() for s in v]
        assert len(set(s for v in seqs.values() for s in v)) == sum(map(len, seqs.values()))
        assert a.available() == total - P * len(set(owned))
        assert not set(a.free_slots()) & {p * P + j for p in owned for j in range(P)}
    for seq in seqs.values():
        a.free(seq)
    assert a.free_slots() == list(range(total))
