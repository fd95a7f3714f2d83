"""The data-parallel routing policy with fake replicas.  Oracles: a brute-force longest common prefix
over everything each fake replica was sent, the load bound as stated in DpRouter's docstring, and
an LRU that must forget the oldest prefix first."""

import random

import pytest

from radixlm.runtime.dp.router import MIN_MATCH_TOKENS, DpRouter


class FakeReplica:
    """What a replica was sent, per namespace; best(ids) is the longest cached prefix by brute force."""

    def __init__(self):
        self.seqs: dict = {}

    def add(self, ids, namespace=None):
        self.seqs.setdefault(namespace, []).append(list(ids))

    def best(self, ids, namespace=None, page=1) -> int:
        def common(a):
            n = 0
            while n < min(len(a), len(ids)) and a[n] == ids[n]:
                n += 1
            return n // page * page
        return max((common(s) for s in self.seqs.get(namespace, [])), default=0)


def run_one(router, fakes, rid, ids, namespace=None, output=()):
    """Route, record on the fake, finish at once (with output tokens)."""
    r = router.route(rid, ids, namespace)
    fakes[r].add(ids, namespace)
    router.finish(rid, list(ids) + list(output))
    fakes[r].add(list(ids) + list(output), namespace)
    return r


def tokens(rng, n):
    return [rng.randrange(3, 300) for _ in range(n)]


@pytest.mark.parametrize("page", [1, 4])
def test_longest_prefix_wins_against_brute_force(page):
    rng = random.Random(page)
    router = DpRouter([10**6] * 3, page_size=page)
    fakes = [FakeReplica() for _ in range(3)]
    groups = [tokens(rng, rng.randrange(8, 40)) for _ in range(6)]
    hits = 0
    for i in range(300):
        g = rng.choice(groups)
        ids = g[:rng.randrange(1, len(g) + 1)] + tokens(rng, rng.randrange(0, 12))
        best = [f.best(ids, page=page) for f in fakes]
        useful = max(page, MIN_MATCH_TOKENS, -(-len(ids) // 5))     # min_share 0.2, rounded up
        if max(best) >= useful:
            hits += 1
            expected = {k for k, b in enumerate(best) if b == max(best)}
        else:  # a miss: least loaded (all idle), then the smaller shadow tree
            sizes = [t.total_size() for t in router.trees]
            expected = {k for k, s in enumerate(sizes) if s == min(sizes)}
        assert [t.prefix_len(ids) for t in router.trees] == best   # capacity is ample: shadows are exact
        r = run_one(router, fakes, f"r{i}", ids, output=tokens(rng, rng.randrange(0, 5)))
        assert r in expected, (i, best, r)
    assert hits > 200
    assert all(f.seqs for f in fakes)            # the prefix groups spread over the replicas
    assert router.loads == [0, 0, 0] and not router.placed


def test_finished_output_tokens_are_learned():
    router = DpRouter([1000, 1000])
    prompt, out = list(range(10, 40)), list(range(100, 120))
    first = router.route("a", prompt)
    router.finish("a", prompt + out)
    router.route("filler", list(range(200, 260)))      # busy elsewhere, within the bound
    assert router.route("b", prompt + out + [7, 8]) == first
    assert router.trees[first].prefix_len(prompt + out + [7, 8]) == len(prompt + out) + 2


def test_namespaces_are_kept_apart():
    router = DpRouter([1000, 1000])
    hot = list(range(10, 70))
    assert router.route("a", hot, "x") == 0
    router.route("b", [5] * 8, "x")                     # replica 1 (least loaded): leaves loads [1, 1]
    router.route("c", hot + [1], "x")                   # follows the prefix: loads [2, 1]
    assert router.loads == [2, 1]
    assert router.trees[0].prefix_len(hot, "x") == 60
    assert router.trees[0].prefix_len(hot, "y") == router.trees[0].prefix_len(hot) == 0
    assert router.route("d", hot + [2], "x") == 0       # a hit within the bound
    assert router.route("e", hot + [3], "y") == 1       # the same tokens in another namespace: a miss
    assert router.route("f", hot + [4], None) == 1      # and in the shared one


@pytest.mark.parametrize("n,abs_t,rel_t", [(2, 4, 0.25), (3, 4, 0.25), (4, 2, 0.0), (2, 0, 0.5)])
def test_a_hot_prefix_cannot_pin_the_traffic(n, abs_t, rel_t):
    """Many requests of one hot prefix that stay in flight: the trap where a pure longest-prefix policy
    sends every one of them to the first replica."""
    router = DpRouter([10**6] * n, abs_threshold=abs_t, rel_threshold=rel_t)
    rng = random.Random(n)
    hot = tokens(rng, 200)
    for i in range(120):
        router.route(f"r{i}", hot + tokens(rng, 3))
        least = min(router.loads)
        assert max(router.loads) - least <= max(1, router.bound(least)), (i, router.loads)
    assert min(router.loads) >= 120 // n - 1 - abs_t - rel_t * 120
    assert sum(router.loads) == 120


def test_the_bound_holds_with_requests_finishing_in_any_order():
    rng = random.Random(7)
    router = DpRouter([10**6] * 3)
    hot, in_flight = [tokens(rng, 100) for _ in range(2)], []
    for i in range(600):
        if in_flight and rng.random() < 0.45:
            router.finish(in_flight.pop(rng.randrange(len(in_flight))))
            continue
        before = list(router.loads)
        least = min(before)
        r = router.route(f"r{i}", rng.choice(hot) + tokens(rng, 4))
        in_flight.append(f"r{i}")
        assert before[r] == least or before[r] + 1 - least <= router.bound(least), (before, r)
        assert sum(router.loads) == len(in_flight)


def test_a_miss_goes_to_the_least_loaded_replica():
    router = DpRouter([1000] * 3)
    prompts = {f"p{i}": [20 + i] * 30 for i in range(9)}
    for rid, ids in prompts.items():
        router.route(rid, ids)                             # all misses: spread 3, 3, 3
    assert router.loads == [3, 3, 3]
    on = {k: [rid for rid in prompts if router.replica_of(rid) == k] for k in range(3)}
    for rid in on[1][:2] + on[2][:1]:
        router.finish(rid)
    assert router.loads == [3, 1, 2]
    assert router.route("new", [9] * 30) == 1              # nothing cached anywhere
    assert router.loads == [3, 2, 2]
    held = prompts[on[0][0]]
    short = held[:5] + [8] * 40                            # 5 of 45 tokens: under the minimum share
    assert router.trees[0].prefix_len(short) == 5
    assert router.route("short", short) in (1, 2)
    assert router.route("long", held[:25] + [8] * 5) == 0   # a useful prefix, load within the bound


def test_a_miss_among_equals_goes_to_the_smaller_shadow_then_round_robin():
    router = DpRouter([1000] * 2)
    assert router.route("a", list(range(10, 50))) == 0
    router.finish("a")
    assert router.route("b", list(range(60, 70))) == 1     # equal loads: the smaller tree
    router.finish("b")
    assert router.route("c", list(range(80, 90))) == 1     # 40 vs 10 tokens cached
    router.finish("c")
    assert router.route("d", list(range(100, 120))) == 1   # 40 vs 20
    router.finish("d")
    assert router.route("e", list(range(130, 150))) == 0   # 40 vs 40: round robin


def test_shadows_forget_least_recently_used_prefixes_at_capacity():
    router = DpRouter([100, 10**6])
    a, d, e = list(range(10, 50)), list(range(60, 100)), list(range(110, 150))
    for rid, ids in (("a", a), ("d", d)):
        router.loads[1] = 10**6                           # keep replica 1 out: every miss goes to 0
        assert router.route(rid, ids) == 0
        router.finish(rid)
    assert router.trees[0].total_size() == 80
    router.loads[1] = 10**6
    assert router.route("a2", a + [1, 2]) == 0            # a hit: touches a (42 tokens, 82 cached)
    router.finish("a2")
    assert router.route("e", e) == 0                      # 122 > 100: the LRU prefix (d) is forgotten
    router.finish("e")
    tree = router.trees[0]
    assert tree.total_size() <= 100
    assert tree.prefix_len(d) == 0 and tree.prefix_len(a + [1, 2]) == 42 and tree.prefix_len(e) == 40
    router.loads[1] = 0
    assert router.route("d2", d + [5]) == 1                # forgotten: a miss, so the least loaded
