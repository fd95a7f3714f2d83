"""StepPlan (entries that point at requests) -> StepBatch (plain data for the runner).

The scheduler's side of the runner contract: which table entries the runner must write (req.table_len
tracks what it has written), the fed token ids (PENDING for a token sampled by the step still in flight),
logprob targets, the sampling rows, and the grammar bitmask filled by the requests' matchers (the rows
without a draft all at once: constrained/mask_filler.py).  A draft's position j is masked in the grammar
state after its first j tokens: the matcher accepts them in turn, stops at the first it refuses (the draft
ends there) or, with draft_jump_forward, after the first that leaves forced text (plain decoding would
jump forward there, not sample), then rolls them all back.
"""

import time

from radixlm.constrained.mask_filler import MaskFiller
from radixlm.runtime.step import PENDING, StepBatch, StepRow


class StepBuilder:
    """build(plan) -> StepBatch, with its grammar mask unless masks=False (then fill_masks(plan.entries, batch)).
    vocab_size sizes the grammar bitmask; its buffer is reused while large enough (a step with grammars
    is collected before the next step's masks are filled, so nothing else reads it)."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._bitmask = None
        self.mask_filler = MaskFiller()

    def build(self, plan, masks: bool = True) -> StepBatch:
        """masks=False leaves the grammar mask to fill_masks (the launcher fills it while the device runs the
        step's forward)."""
        batch = StepBatch([self._row(e) for e in plan.entries], state_copies=plan.state_copies)
        if masks and self.needs_masks(plan):
            self.fill_masks(plan.entries, batch)
        return batch

    @staticmethod
    def needs_masks(plan) -> bool:
        """Whether a sampled row of the plan is constrained (its batch then needs fill_masks)."""
        return any(e.sample and e.req.grammar is not None for e in plan.entries)

    @staticmethod
    def _row(e) -> StepRow:
        req = e.req
        start, n = e.prefix_len, e.extend_len
        end = start + n
        table_start, table_slots = req.table_len, ()
        if table_start < end:
            table_slots = req.kv_slots[table_start:end]
            req.table_len = end
        fill = req.fill_ids
        known = len(fill)
        if n == 1 and not e.draft:     # a decode: its token is known, or still in flight
            ids = [fill[start]] if start < known else [PENDING]
            slots = [req.kv_slots[start]]
        else:
            real = n - len(e.draft)
            ids = fill[start:min(start + real, known)]
            ids.extend([PENDING] * (start + real - max(known, start)))   # the token still in flight
            ids.extend(e.draft)
            slots = req.kv_slots[start:end]
        row = StepRow(req.rid, req.row, start, n, ids, slots, table_start, table_slots, e.sample, e.draft)
        if e.logprob_positions:
            row.logprob_positions = e.logprob_positions
            row.logprob_targets = [fill[q + 1] for q in e.logprob_positions]
            row.top_logprobs_num = req.top_logprobs_num
        if e.sample:
            params = req.sampling_params
            row.sampling = params
            row.output_len = known - req.prompt_len + req.in_flight
            row.return_logprob = req.return_logprob
            row.top_logprobs_num = req.top_logprobs_num
            if params.repetition_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
                row.prompt_ids, row.output_ids = req.origin_input_ids, req.output_ids
        return row

    def fill_masks(self, entries, batch: StepBatch) -> None:
        """The batch's grammar mask, its rows and the drafts' limits."""
        import torch  # only steps with grammars reach here

        started = time.perf_counter()
        total = sum(len(e.draft) + 1 for e in entries if e.sample)
        width = (self.vocab_size + 31) // 32
        if self._bitmask is None or self._bitmask.shape[0] < total:
            self._bitmask = torch.empty((max(total, 64), width), dtype=torch.int32)   # [S, W] host
        bitmask = self._bitmask[:total]                                             # [S, W]
        first = 0
        grammars, grammar_rows = [], []     # one masked row each, filled together
        for e, row in zip(entries, batch.rows):
            if not e.sample:
                continue
            grammar = None if e.dropped else e.req.grammar
            if grammar is not None and not e.draft:
                grammars.append(grammar)
                grammar_rows.append(first)
                batch.mask_rows.append(first)
            elif grammar is not None:
                self._mask_entry(e, row, grammar, bitmask, first, batch.mask_rows)
            first += len(e.draft) + 1
        if grammars:
            self.mask_filler.fill(grammars, bitmask, grammar_rows)
        batch.mask = bitmask
        batch.mask_seconds = time.perf_counter() - started

    @staticmethod
    def _mask_entry(e, row: StepRow, grammar, bitmask, first: int, mask_rows: list) -> None:
        draft = e.draft
        grammar.fill_bitmask(bitmask, first)
        mask_rows.append(first)
        n = 0
        while n < len(draft) and not grammar.is_terminated() and grammar.accept_token(draft[n]):
            n += 1
            if e.draft_jump_forward and not grammar.is_terminated() and grammar.find_jump_forward_string():
                row.draft_forced = True
                break
            if not grammar.is_terminated():
                grammar.fill_bitmask(bitmask, first + n)
                mask_rows.append(first + n)
        grammar.rollback(n)
        row.draft_legal = n
