"""The plain data a step hands between the scheduler and the model runner; both import it, neither
imports the other."""
from dataclasses import dataclass
from typing import Optional


@dataclass
class EntryResult:
    """What the model runner reports back for one StepEntry."""
    next_token: Optional[int] = None
    output_logprob: Optional[float] = None
    output_top: Optional[list] = None       # [(logprob, token_id), ...]
    input_logprobs: Optional[list] = None   # [[logprob, token_id, top], ...] for entry.logprob_positions
    next_tokens: Optional[list] = None      # an entry with a draft: the accepted draft tokens, then the one sampled after
    token_logprobs: Optional[list] = None   # with next_tokens, when logprobs are asked: [(logprob, top), ...]
