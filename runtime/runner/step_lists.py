"""A step's rows (runtime/step.py) flattened into the plain lists the runner turns into tensors.

A step of decodes only (one token a row, no prompt logprobs) is flattened column by column; any other step
row by row.  Both give the same lists.
"""

from dataclasses import dataclass

from radixlm.runtime.step import PENDING


@dataclass
class StepLists:
    input_ids: list       # [T] fed tokens, PENDING where the step before sampled it on the device
    out_loc: list         # [T] KV slot of each
    prefix_lens: list     # [B]
    extend_lens: list     # [B]
    req_rows: list        # [B] req_to_token row of each
    logits_idx: list      # [N] positions of [T] whose logits are computed
    table_rows: list      # [W] req_to_token entries this step writes: row, column, slot
    table_cols: list
    table_slots: list
    pending_at: list      # [P] positions of [T] that take the step before's sample of ...
    pending_rows: list    # [P] ... this table row
    sample_rows: dict     # row index -> its first sampled position in logits_idx
    logprob_rows: dict    # row index -> its first prompt-logprob position in logits_idx


def step_lists(rows) -> StepLists:
    if all(r.extend_len == 1 and not r.logprob_positions for r in rows):
        return decode_lists(rows)
    return row_lists(rows)


def row_lists(rows) -> StepLists:
    """Any step.  A sampled row with a draft of k tokens takes logits at its last k + 1 positions: the
    token after the real ones, and after each draft token."""
    lists = StepLists([], [], [r.prefix_len for r in rows], [r.extend_len for r in rows], [r.row for r in rows],
                      [], [], [], [], [], [], {}, {})
    input_ids, out_loc, logits_idx = lists.input_ids, lists.out_loc, lists.logits_idx
    offset = 0
    for i, r in enumerate(rows):
        if r.table_slots:
            _write_table(lists, r)
        if PENDING in r.input_ids:
            lists.pending_at.extend(offset + j for j, t in enumerate(r.input_ids) if t == PENDING)
            lists.pending_rows.extend(r.row for t in r.input_ids if t == PENDING)
        input_ids.extend(r.input_ids)
        out_loc.extend(r.out_slots)
        real = r.extend_len - len(r.draft)
        if r.logprob_positions:
            lists.logprob_rows[i] = len(logits_idx)
            logits_idx.extend(offset + q - r.prefix_len for q in r.logprob_positions)
        if r.sample:
            lists.sample_rows[i] = len(logits_idx)
            logits_idx.extend(range(offset + real - 1, offset + r.extend_len))
        offset += r.extend_len
    return lists


def decode_lists(rows) -> StepLists:
    """A step whose every row feeds one token (so none has a draft) and asks no prompt logprobs: position i
    of [T] is row i."""
    input_ids = [r.input_ids[0] for r in rows]
    req_rows = [r.row for r in rows]
    sampled = [i for i, r in enumerate(rows) if r.sample]
    pending_at = [i for i, t in enumerate(input_ids) if t == PENDING]
    lists = StepLists(input_ids, [r.out_slots[0] for r in rows], [r.prefix_len for r in rows], [1] * len(rows),
                      req_rows, sampled, [], [], [], pending_at, [req_rows[i] for i in pending_at],
                      dict(zip(sampled, range(len(sampled)))), {})
    for r in rows:
        if r.table_slots:
            _write_table(lists, r)
    return lists


def _write_table(lists: StepLists, r) -> None:
    n = len(r.table_slots)
    lists.table_rows.extend([r.row] * n)
    lists.table_cols.extend(range(r.table_start, r.table_start + n))
    lists.table_slots.extend(r.table_slots)
