"""The scheduler's decision for one step, as plain data (no torch), and the planner that makes it.

Every step carries all running decodes plus as many prefill tokens as the budget allows: a long
prompt is split into chunks so decodes never wait for more than one chunk.
"""

from dataclasses import dataclass, field

SHARE_LOOKAHEAD = 8   # waiting requests (the policy puts those sharing a prefix together) a prompt looks ahead at


@dataclass
class StepEntry:
    req: object
    prefix_len: int             # tokens of req already in the KV pool
    extend_len: int             # tokens fed this step: req.fill_ids[prefix_len:prefix_len+extend_len]
    sample: bool                # the extend reaches the end of fill_ids: draw the next token
    logprob_positions: list = field(default_factory=list)  # positions q whose logits score token q+1
    draft: list = field(default_factory=list)  # speculative tokens fed after the real ones (their KV slots
                                               # are the last len(draft) of the extend); sampled at every one
    draft_jump_forward: bool = False  # the draft ends where the grammar forces text (jump-forward appends it)
    dropped: bool = False       # launched, then undone by the step before's results: no mask, result not applied


@dataclass
class StepPlan:
    entries: list
    num_prefill_tokens: int = 0
    num_decode: int = 0
    num_draft_tokens: int = 0
    retracted: list = field(default_factory=list)
    state_copies: list = field(default_factory=list)   # (src, dst) state slots to copy first (kv_manager.py)

    @property
    def empty(self) -> bool:
        return not self.entries


@dataclass(frozen=True)
class PlanLimits:
    max_running_requests: int
    prefill_budget: int          # new prefill tokens per step (chunk size)
    allow_oversize_first: bool   # chunking off: a prompt bigger than the budget runs alone
    context_len: int


class Planner:
    """Builds a StepPlan from the running set and the ordered waiting queue; mutates KV state."""

    def __init__(self, kv, limits: PlanLimits, new_token_ratio: float = 0.5, in_batch_prefix_min: int = 32,
                 speculator=None):
        self.kv = kv
        self.speculator = speculator
        self.limits = limits
        self.in_batch_prefix_min = in_batch_prefix_min
        self.new_token_ratio = new_token_ratio
        self.min_token_ratio = min(0.1, new_token_ratio)

    def plan(self, running: list, waiting_ordered: list, on_admit, on_retract, on_oom) -> StepPlan:
        """Mutates running (admits, retracts) and KV state; returns what the runner computes."""
        decoding, retracted = self._reserve_decodes(running, on_retract, on_oom)
        budget = self.limits.prefill_budget
        entries, drafted = self._decode_entries(decoding, budget)
        budget -= drafted
        prefill_tokens = 0
        # prompts whose uncached part this step computes: those still chunking (before their chunk is allocated),
        # then each admitted one
        admitted_keys: list = [r.fill_ids for r in running if not r.prefill_done and (r.pending_len > 1 or r.in_flight)]
        decoding_ids = {id(r) for r in decoding}
        for req in running:
            if req.pending_len > 0 and not req.in_flight and id(req) not in decoding_ids:
                n = self.kv.extend_cap(req, req.computed_len, min(req.pending_len, budget))
                if n <= 0 or not self.kv.alloc(req, n):
                    continue
                entries.append(self._entry(req, n))
                budget -= n
                prefill_tokens += n
        for i, req in enumerate(waiting_ordered):
            if budget <= 0 or len(running) >= self.limits.max_running_requests or not self.kv.has_row():
                break
            usable, match = self.kv.match(req)
            need = req.seq_len - usable
            if self._shares_uncached_prefix(req, usable, admitted_keys):
                continue
            future = int(req.remaining_new_tokens() * self.new_token_ratio)
            if self.kv.available() - self._reserved(running) < need + future:
                if running:
                    break
            n = min(need, budget)
            if n < need and self.limits.allow_oversize_first:
                if prefill_tokens:
                    break
                n = need  # chunking is off: a prompt bigger than the budget runs alone
            self.kv.share_point(req, usable, waiting_ordered[i + 1:i + 1 + SHARE_LOOKAHEAD])
            n = self.kv.extend_cap(req, usable, n)
            self.kv.admit(req, usable, match)
            if not self.kv.alloc(req, n):
                self.kv.release(req, cache=False)
                break
            if not req.prefill_done:
                req.cached_tokens = usable
            on_admit(req)
            running.append(req)
            admitted_keys.append(req.fill_ids)
            entries.append(self._entry(req, n))
            budget -= n
            prefill_tokens += n
        copies = self.kv.take_state_copies() if entries else []   # else they wait for a step that runs
        return StepPlan(entries, prefill_tokens, len(decoding), drafted, retracted, copies)

    def _decode_entries(self, decoding, budget) -> tuple:
        """One entry per decoding request, with the speculator's draft where free slots hold it (a
        draft never evicts cached prefixes); returns (entries, draft tokens)."""
        drafts = self.speculator.propose(decoding, budget) if self.speculator else {}
        entries, drafted = [], 0
        for req in decoding:
            draft = drafts.get(id(req))
            if draft and self.kv.allocator.available() >= len(draft) and self.kv.alloc(req, len(draft)):
                n = 1 + len(draft)
                entries.append(StepEntry(req, req.computed_len - n, n, sample=True, draft=draft,
                                         draft_jump_forward=self.speculator.jump_forward_on(req)))
                drafted += len(draft)
            else:   # a decode: its one slot is reserved, so the token fed is the last and sampled
                entries.append(StepEntry(req, len(req.kv_slots) - 1, 1, True))
        return entries, drafted

    def _entry(self, req, n) -> StepEntry:
        prefix = req.computed_len - n
        end = prefix + n
        entry = StepEntry(req, prefix, n, sample=end == req.seq_len)
        if req.return_logprob and req.logprob_start_len >= 0 and not req.prefill_done:
            prompt_len = req.prompt_len
            lo = max(prefix, req.logprob_start_len - 1, 0)
            hi = min(end, prompt_len - 1)
            entry.logprob_positions = list(range(lo, hi))
        return entry

    def _reserve_decodes(self, running, on_retract, on_oom):
        """Give every decoding request one slot; retract the least advanced requests when KV runs out.

        Victims are chosen before anything is allocated, so a retracted request never holds a slot
        whose KV was not computed.
        """
        retracted: list = []
        decoding = self.decoding(running)
        while decoding and self.kv.available() < self.decode_need(decoding):
            victims = [r for r in running if r not in retracted]
            if len(victims) <= 1:
                break
            victim = min(victims, key=lambda r: (len(r.output_ids), -r.arrival_step))
            on_retract(victim)
            retracted.append(victim)
            if victim in decoding:
                decoding.remove(victim)
            self.new_token_ratio = min(1.0, self.new_token_ratio + 0.1)
        for req in [] if self.kv.alloc_decodes(decoding) else list(decoding):
            if not self.kv.alloc(req, 1):
                on_oom(req)
                retracted.append(req)
                decoding.remove(req)
        for r in retracted:
            if r in running:
                running.remove(r)
        return decoding, retracted

    def decoding(self, running) -> list:
        """The requests that decode one token this step.  A request whose token in flight is its last (max
        new tokens, or the context) waits for it instead: it finishes when that token is seen."""
        limit = self.limits.context_len
        return [r for r in running if r.pending_len == 1 and (r.prefill_done or r.in_flight)
                and not (r.in_flight and (r.remaining_new_tokens() == 0 or r.seq_len >= limit))]

    def decode_need(self, decoding) -> int:
        """Slots the decodes of this step take (a new page for each request at a page boundary)."""
        page = self.kv.page_size
        return sum(1 for r in decoding if r.computed_len % page == 0) * page

    def _reserved(self, running) -> int:
        return sum(int(r.remaining_new_tokens() * self.new_token_ratio) + max(0, r.pending_len - 1)
                   for r in running)

    def _shares_uncached_prefix(self, req, usable, admitted_keys) -> bool:
        """A request whose uncached prefix another request of this batch is computing waits one step,
        then hits the cache instead of computing the same tokens twice."""
        ids, k = req.fill_ids, self.in_batch_prefix_min
        window = ids[usable:usable + k]
        return any(len(window) == k and min(len(ids), len(other)) - 1 - usable >= k
                   and other[usable:usable + k] == window for other in admitted_keys)

    def decay_ratio(self) -> None:
        self.new_token_ratio = max(self.min_token_ratio, self.new_token_ratio - 0.002)
