"""Counters the scheduler keeps for server_info, metrics and the progress log."""

from dataclasses import asdict, dataclass


@dataclass
class SchedulerStats:
    received: int = 0
    finished: int = 0
    retracted: int = 0
    steps: int = 0
    prefill_tokens: int = 0      # prompt tokens computed (cache misses)
    cached_prompt_tokens: int = 0
    decode_tokens: int = 0
    forward_seconds: float = 0.0

    def record_step(self, plan, seconds: float) -> None:
        self.steps += 1
        self.prefill_tokens += plan.num_prefill_tokens
        self.decode_tokens += plan.num_decode
        self.forward_seconds += seconds

    def as_dict(self) -> dict:
        return asdict(self)
