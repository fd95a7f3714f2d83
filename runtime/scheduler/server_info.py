"""server_info(scheduler): what the scheduler reports to /get_server_info and /metrics."""


def server_info(sched) -> dict:
    """The scheduler's part of /get_server_info: KV, counters, tiers, drafts, expert load and its settings."""
    info = dict(sched.kv.stats())
    info.update(sched.stats.as_dict())
    if sched.disk:
        info.update(sched.disk.stats())
    if sched.speculator:
        info.update(sched.speculator.stats())
    expert_load = sched.runner.expert_load() if hasattr(sched.runner, "expert_load") else None
    if expert_load:
        info["moe_expert_tokens"] = expert_load
    info.update({
        "num_running_reqs": len(sched.running),
        "num_waiting_reqs": len(sched.waiting),
        "num_grammar_queue_reqs": len(sched.grammar_queue) if sched.grammar_queue else 0,
        "grammar_backend": sched.config.grammar_backend if sched.grammar_queue is not None else "none",
        "jump_forward_tokens": sched.forced.jump_forward_tokens,
        "forced_thinking_tokens": sched.forced.forced_thinking_tokens,
        "context_length": sched.context_len,
        "schedule_policy": sched.config.schedule_policy,
        "disable_radix_cache": sched.config.disable_radix_cache,
        "chunked_prefill_size": sched.config.chunked_prefill_size,
        "max_running_requests": sched.config.max_running_requests,
        "quantization": getattr(sched.runner, "quantization", "none"),   # what was loaded (--quantization)
    })
    return info
