"""Counters the scheduler keeps for server_info, metrics and the progress log."""

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass
class SchedulerStats:
    received: int = 0
    finished: int = 0
    retracted: int = 0
    steps: int = 0
    prefill_tokens: int = 0      # tokens fed by extend entries: prompt cache misses (and jump-forward
                                 # tokens, output tokens re-fed after a retraction)
    cached_prompt_tokens: int = 0
    decode_tokens: int = 0
    forward_seconds: float = 0.0
    grammar_mask_steps: int = 0          # steps with at least one grammar-constrained row
    grammar_mask_seconds: float = 0.0    # of forward_seconds: filling the grammar masks and applying them
    launched_steps: int = 0
    overlapped_steps: int = 0            # of those, launched while the step before was still in flight
    dropped_in_flight: int = 0           # sampled rows of those undone by the step before's results
                                         # (their request finished, or forced text replaced their input)
    launch_seconds: float = 0.0          # host time building and launching steps (the runner's launch)
    collect_wait_seconds: float = 0.0    # host time waiting for launched steps' results: the device's share

    def record_overlap(self, overlapped: bool) -> None:
        self.launched_steps += 1
        self.overlapped_steps += int(overlapped)

    def record_step(self, plan, seconds: float, mask_seconds: Optional[float] = None) -> None:
        """mask_seconds: the runner's mask time in this step, None when no row was constrained."""
        self.steps += 1
        self.prefill_tokens += plan.num_prefill_tokens
        self.decode_tokens += plan.num_decode
        self.forward_seconds += seconds
        if mask_seconds is not None:
            self.grammar_mask_steps += 1
            self.grammar_mask_seconds += mask_seconds

    def as_dict(self) -> dict:
        return asdict(self)
