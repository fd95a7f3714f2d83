"""One short log line every few seconds while the scheduler works."""

import logging
import time

logger = logging.getLogger("radixlm.progress")


class ProgressLog:
    def __init__(self, scheduler, interval: float = 5.0):
        self.scheduler = scheduler
        self.interval = interval
        self.last_time = time.monotonic()
        self.last = dict(scheduler.stats.as_dict())

    def attach(self) -> None:
        self.scheduler.after_step.append(self.maybe_log)

    def maybe_log(self) -> None:
        now = time.monotonic()
        if self.interval <= 0 or now - self.last_time < self.interval:
            return
        s, stats = self.scheduler, self.scheduler.stats.as_dict()
        dt = now - self.last_time
        gen = (stats["decode_tokens"] - self.last["decode_tokens"]) / dt
        pre = (stats["prefill_tokens"] - self.last["prefill_tokens"]) / dt
        hit_new = stats["cached_prompt_tokens"] - self.last["cached_prompt_tokens"]
        miss_new = stats["prefill_tokens"] - self.last["prefill_tokens"]
        hit = hit_new / (hit_new + miss_new) if hit_new + miss_new else 0.0
        kv = s.kv.stats()
        logger.info("running %d, queued %d, prefill %.0f tok/s, decode %.0f tok/s, KV %d/%d used, cache hit %.0f%%",
                    len(s.running), len(s.waiting), pre, gen, kv["used_slots"], kv["max_total_num_tokens"], 100 * hit)
        self.last_time, self.last = now, dict(stats)
