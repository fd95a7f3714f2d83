"""The slice-comparing prefix match of the radix tree against a token-by-token brute force."""

from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.radix_cache.radix_tree import RadixCache, _common_prefix


def brute_common_prefix(a, b, pos, n):
    i = 0
    while i < n and a[i] == b[pos + i]:
        i += 1
    return i


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=300), st.lists(st.integers(0, 2), max_size=300), st.data())
def test_common_prefix_matches_brute_force(a, b, data):
    pos = data.draw(st.integers(0, len(b)))
    b = b[:pos] + (a[: data.draw(st.integers(0, len(a)))] + b[pos:])  # often a long shared run
    n = min(len(a), len(b) - pos)
    assert _common_prefix(a, b, pos, n) == brute_common_prefix(a, b, pos, n)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 4, 16]), st.integers(0, 2000), st.integers(0, 2000), st.integers(1, 2000))
def test_long_keys_match_the_brute_force_prefix(P, cut, other_cut, length):
    base = [(i * 7919) % 50021 for i in range(2048)]
    tree = RadixCache(page_size=P)
    tree.insert(base, list(range(len(base))))
    other = base[:other_cut] + [50021 + i for i in range(64)]
    tree.insert(other, list(range(10_000, 10_000 + len(other))))
    query = base[:cut] + [60000] + base[cut + 1:length]
    want = 0
    for stored in (base, other):
        n = brute_common_prefix(stored, query, 0, min(len(stored), len(query)))
        want = max(want, n // P * P)
    got = tree.match_prefix(query)
    assert got.length == want
    # a position's slot is base's where its whole page prefix is base's, else other's (inserted second)
    ends = [(i // P + 1) * P for i in range(want)]
    assert got.slots == [i if query[:e] == base[:e] else 10_000 + i for i, e in zip(range(want), ends)]
