"""Waiting-queue order: lpm (longest prefix match), dfs-weight, fcfs; with an ageing bound.

Plain Python.  `order` computes each request's prefix match (kept in req.prefix_match, with its
length in req.prefix_match_len, for admission to reuse in the same step) and returns the queue in
the order admission should try it.  A request that has waited more than
age_limit scheduler steps goes first under every policy, so cache-friendly orders never starve it.
"""

POLICIES = ("lpm", "dfs-weight", "fcfs")
LPM_MAX_QUEUE = 256  # above this, matching every request each step costs more than it saves


class SchedulePolicy:
    def __init__(self, policy: str, tree, age_limit: int = 256):
        if policy not in POLICIES:
            raise ValueError(f"unknown schedule policy {policy!r}; choose one of {', '.join(POLICIES)}")
        self.policy = policy
        self.tree = tree
        self.age_limit = age_limit

    def order(self, waiting: list, step: int) -> list:
        for r in waiting:
            r.prefix_match = None  # only this step's match may be reused
        aged = [r for r in waiting if step - r.arrival_step > self.age_limit]
        aged_ids = {id(r) for r in aged}
        rest = [r for r in waiting if id(r) not in aged_ids]
        aged.sort(key=lambda r: r.arrival_step)
        if self.policy == "fcfs" or len(waiting) > LPM_MAX_QUEUE:
            rest.sort(key=lambda r: r.arrival_step)
        elif self.policy == "lpm":
            for r in rest:
                self._match(r)
            rest.sort(key=lambda r: (-r.prefix_match_len, r.arrival_step))
        else:
            rest = self._dfs_weight(rest)
        return aged + rest

    def _match(self, req):
        m = req.prefix_match = self.tree.match_prefix(req.fill_ids, req.cache_namespace)
        req.prefix_match_len = m.length
        return m

    def _dfs_weight(self, reqs: list) -> list:
        """Depth-first over the tree, heavier subtrees (more waiting requests) first, deeper matches first."""
        at_node: dict = {}
        for r in reqs:
            m = self._match(r)
            at_node.setdefault(id(m.node), (m.node, []))[1].append(r)
        weight: dict = {}
        for node, rs in at_node.values():
            n = node
            while n is not None:
                weight[id(n)] = weight.get(id(n), 0) + len(rs)
                n = n.parent
        out: list = []

        def visit(node):  # children first, heaviest first, then the requests ending at node
            kids = sorted((c for c in node.children.values() if id(c) in weight), key=lambda c: -weight[id(c)])
            for child in kids:
                visit(child)
            if id(node) in at_node:
                out.extend(sorted(at_node[id(node)][1], key=lambda r: r.arrival_step))

        for root in self.tree.roots():
            visit(root)
        return out
