"""Data-parallel routing: which scheduler replica gets a request (plain Python, no torch).

The front (TokenizerManager) keeps one shadow radix tree of token ids per replica and the number of
requests it has sent each replica that have not finished (its load).  A request goes to the replica
whose shadow holds the longest prefix of its token ids within its cache namespace, among the
replicas whose load stays within the bound of the least loaded one:

    bound(least) = abs_threshold + rel_threshold * least
    replica i may take the request if load[i] == least or load[i] + 1 - least <= bound(least)

so a hot prefix cannot pin all traffic to one replica: once its replica is `bound` requests ahead,
the next request goes elsewhere (and from then on that replica's shadow holds the prefix too).  A
miss (no allowed replica holds at least max(page_size, MIN_MATCH_TOKENS, min_share * len(ids))
tokens of the prompt: a template header or a few tokens are not worth a detour)
goes to the least loaded replica; ties go to the smaller shadow tree (distinct prefixes spread over
the replicas' caches), then round robin.

The shadows are approximate.  Each is updated with the prompt of every request routed to its
replica and, when the request finishes, with its prompt and output tokens, and is bounded to that
replica's KV capacity (max_total_num_tokens) with LRU eviction, so it forgets roughly what the
replica must have evicted.  They do not see the replica's exact eviction order (running requests'
locks, chunked prefills, retractions, tokens the replica refused or has not computed yet); a wrong
guess costs a cache miss or a needless detour, never a wrong answer.
"""

import math
from typing import Optional, Sequence

from radixlm.radix_cache.radix_tree import RadixCache

DEFAULT_MIN_SHARE = 0.2      # a prefix shorter than this share of the prompt is a miss
MIN_MATCH_TOKENS = 4         # and so is one shorter than this


class DpRouter:
    """Routing state of the front for N replicas.

    route(rid, ids, namespace) picks a replica and counts the request in its load; finish(rid, ids)
    uncounts it (once; unknown rids are ignored) and teaches its shadow the tokens it now caches;
    flush(replica) empties one shadow.  Only the front calls these, from one thread.
    """

    def __init__(self, capacities: Sequence[int], page_size: int = 1, abs_threshold: int = 4,
                 rel_threshold: float = 0.25, min_share: float = DEFAULT_MIN_SHARE,
                 disable_cache: bool = False):
        if not capacities:
            raise ValueError("a router needs at least one replica")
        self.capacities = [int(c) for c in capacities]
        self.page_size = page_size
        self.abs_threshold, self.rel_threshold, self.min_share = abs_threshold, rel_threshold, min_share
        self.trees = [RadixCache(page_size, disable=disable_cache) for _ in capacities]
        self.loads = [0] * len(capacities)
        self.placed: dict = {}          # rid -> (replica, namespace)
        self._turn = 0                  # round-robin offset for ties

    @classmethod
    def from_info(cls, info: dict) -> "DpRouter":
        """From the backend's ready info: "replicas" (each with max_total_num_tokens) and "dp_router"
        (page_size, abs_threshold, rel_threshold, disable_cache)."""
        return cls([r["max_total_num_tokens"] for r in info["replicas"]], **info.get("dp_router", {}))

    def __len__(self) -> int:
        return len(self.loads)

    def bound(self, least: int) -> float:
        return self.abs_threshold + self.rel_threshold * least

    def route(self, rid: str, ids: Sequence[int], namespace: Optional[str] = None) -> int:
        n = len(self.loads)
        least = min(self.loads)
        limit = self.bound(least)
        order = [(self._turn + k) % n for k in range(n)]     # round robin among equals
        allowed = [i for i in order if self.loads[i] == least or self.loads[i] + 1 - least <= limit]
        useful = max(self.page_size, MIN_MATCH_TOKENS, math.ceil(self.min_share * len(ids)))
        matched = {i: self.trees[i].prefix_len(ids, namespace) for i in allowed}
        hits = [i for i in allowed if matched[i] >= useful]
        if hits:
            choice = max(hits, key=lambda i: (matched[i], -self.loads[i]))
        else:
            choice = min(order, key=lambda i: (self.loads[i], self.trees[i].total_size()))
            self._turn = (self._turn + 1) % n
        self.loads[choice] += 1
        self.placed[rid] = (choice, namespace)
        self._learn(choice, ids, namespace)
        return choice

    def replica_of(self, rid: str) -> Optional[int]:
        placed = self.placed.get(rid)
        return None if placed is None else placed[0]

    def finish(self, rid: str, ids: Optional[Sequence[int]] = None) -> None:
        """The request is over (finished, aborted or failed); ids: the tokens its replica now caches."""
        placed = self.placed.pop(rid, None)
        if placed is None:
            return
        replica, namespace = placed
        self.loads[replica] -= 1
        if ids:
            self._learn(replica, ids, namespace)

    def flush(self, replica: int) -> None:
        self.trees[replica].flush()

    def _learn(self, replica: int, ids: Sequence[int], namespace) -> None:
        tree = self.trees[replica]
        tree.insert(ids, ids, namespace)                   # the ids double as dummy slot values
        over = tree.total_size() - self.capacities[replica]
        if over > 0:
            tree.evict(over)
