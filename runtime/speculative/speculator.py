"""Which decoding requests get a draft this step, and how long (plain Python, no torch).

Sources, per request: the radix tree's cached continuation of its whole token list (a retry, an
agent re-asking, a templated answer another request already produced), else prompt lookup over its
own prompt and output (`NgramIndex`). When it pays: a step's decodes plus drafts stay within
`max_step_tokens` (past that a verify pass costs more than it saves: on CPU a step's time grows
with its tokens once the weights are no longer the whole cost), handed out to the requests whose
drafts were accepted most; a request's draft length follows its recent acceptance, and a request
whose drafts keep failing rests for a growing number of steps before it is drafted for again.
"""

from radixlm.runtime.speculative.ngram import NgramIndex

MAX_REST = 64          # steps a request whose drafts keep failing waits, at most, before the next try


class SpecState:
    """One request's drafting state."""

    __slots__ = ("index", "accept_avg", "misses", "rest")

    def __init__(self, num_draft_tokens: int):
        self.index = NgramIndex()
        self.accept_avg = float(num_draft_tokens)  # recent accepted drafts per verify (optimistic start)
        self.misses = 0                            # verifies in a row that accepted nothing
        self.rest = 0                              # steps left before the next draft


class Speculator:
    def __init__(self, tree, num_draft_tokens: int = 8, max_step_tokens: int = 32, context_len: int = 1 << 30,
                 jump_forward_on=lambda req: False):
        self.tree = tree
        self.jump_forward_on = jump_forward_on   # req -> whether jump-forward appends its grammar's forced text
        self.k = num_draft_tokens
        self.max_step_tokens = max_step_tokens
        self.context_len = context_len
        self.verify_passes = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0

    def propose(self, decoding: list, budget: int) -> dict:
        """id(req) -> draft tokens, for the decoding requests worth drafting for this step."""
        budget = min(budget, self.max_step_tokens - len(decoding))
        if budget <= 0:
            return {}
        candidates = []
        for req in decoding:
            if not req.sampling_params.speculative:
                continue
            state = req.spec
            if state is None:
                state = req.spec = SpecState(self.k)
            if state.rest > 0:
                state.rest -= 1
                continue
            candidates.append(req)
        candidates.sort(key=lambda r: -r.spec.accept_avg)
        drafts = {}
        for req in candidates:
            if budget <= 0:
                break
            state = req.spec
            k = min(self.k, int(state.accept_avg) + 2, budget, req.remaining_new_tokens() - 1,
                    self.context_len - req.seq_len - 1)
            if k <= 0:
                continue
            draft = self.tree.continuation(req.fill_ids, k, req.cache_namespace)
            if len(draft) < k:
                own = state.index.draft(req.fill_ids, k)
                if len(own) > len(draft):
                    draft = own
            if draft:
                drafts[id(req)] = draft
                budget -= len(draft)
        return drafts

    def record(self, req, drafted: int, accepted: int) -> None:
        """A verify pass of `drafted` tokens kept `accepted` of them."""
        state = req.spec
        req.spec_verify_ct += 1
        req.spec_accepted_tokens += accepted
        self.verify_passes += 1
        self.draft_tokens += drafted
        self.accepted_tokens += accepted
        state.accept_avg = 0.5 * state.accept_avg + 0.5 * accepted
        if accepted:
            state.misses = 0
        else:
            state.misses += 1
            if state.misses >= 2:
                state.rest = min(MAX_REST, 1 << (state.misses - 1))

    def stats(self) -> dict:
        return {"spec_verify_passes": self.verify_passes, "spec_draft_tokens": self.draft_tokens,
                "spec_accepted_tokens": self.accepted_tokens,
                "spec_accept_length": (self.verify_passes + self.accepted_tokens) / max(1, self.verify_passes)}
