"""The plain data a step hands between the scheduler and the model runner; both import it, neither
imports the other.  The scheduler builds a StepBatch (scheduler/step_builder.py), the runner computes it
and returns one EntryResult per row; nothing here refers to a request object."""
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

PENDING = -1   # an input id the runner takes from its own last sample for that table row (overlap scheduling)


@dataclass
class StepRow:
    """One request's share of a step.

    The row feeds input_ids (extend_len tokens at positions prefix_len..) into out_slots; before that the
    runner writes table_slots into req_to_token[row, table_start:table_start + len(table_slots)].  A decode
    row whose token the previous step sampled and the host has not seen yet carries PENDING as its input id.
    """
    rid: Any                       # for logs and test runners only
    row: int                       # req_to_token row
    prefix_len: int                # tokens already in the KV pool
    extend_len: int                # tokens fed now (real ones, then the draft)
    input_ids: list                # [extend_len]
    out_slots: list                # [extend_len] KV slot of each fed token
    table_start: int = 0
    table_slots: list = field(default_factory=list)
    sample: bool = False           # draw the next token (at the last real position and after each draft token)
    draft: list = field(default_factory=list)          # speculative tokens: the last len(draft) of input_ids
    draft_legal: Optional[int] = None   # draft tokens the grammar allows (None: all)
    draft_forced: bool = False     # the grammar forces text right after the allowed draft (no sample there)
    logprob_positions: list = field(default_factory=list)  # positions q whose logits score logprob_targets
    logprob_targets: list = field(default_factory=list)    # the token at q + 1 of each
    return_logprob: bool = False   # logprobs of the sampled tokens
    top_logprobs_num: int = 0
    sampling: Any = None           # SamplingParams
    output_len: int = 0            # output tokens before this step's first sample (seeds, min_new_tokens)
    prompt_ids: Sequence = ()      # only where penalties read the history
    output_ids: Sequence = ()      # likewise


@dataclass
class StepBatch:
    """One step.  mask: int32 [S, ceil(V / 32)] grammar bitmask over the step's sampled positions (row r of
    the mask is the r-th sampled position: each sampled row's last real position, then one per draft
    token, in row order), filled for mask_rows only; None when no row is constrained."""
    rows: list
    mask: Any = None
    mask_rows: list = field(default_factory=list)
    mask_seconds: Optional[float] = None   # host time spent filling the mask
    state_copies: list = field(default_factory=list)   # recurrent states: (src, dst) state slots copied, in order,
                                                       # before the forward (radix_cache/state_snapshots.py)

    @property
    def empty(self) -> bool:
        return not self.rows


@dataclass
class EntryResult:
    """What the model runner reports back for one StepRow."""
    next_token: Optional[int] = None
    output_logprob: Optional[float] = None
    output_top: Optional[list] = None       # [(logprob, token_id), ...]
    input_logprobs: Optional[list] = None   # [[logprob, token_id, top], ...] for row.logprob_positions
    next_tokens: Optional[list] = None      # a row with a draft: the accepted draft tokens, then the one sampled after
    token_logprobs: Optional[list] = None   # with next_tokens, when logprobs are asked: [(logprob, top), ...]
