"""Prometheus metrics of the HTTP server, in a private registry (never prometheus_client's global one).

Fed two ways:
- per request, by `on_output(state, new_ids, now)`, registered in `TokenizerManager.listeners`:
  token counters, time to first token, inter-token latency, end-to-end latency;
- per scrape, by `update_server_info(info)` with the scheduler's `get_server_info()`: running and
  queued requests, KV usage, radix cache hit rate.

Names (all prefixed `radixlm_`), for dashboards and bench/serving.py:
  prompt_tokens_total, generation_tokens_total, cached_tokens_total, requests_total{finish_reason},
  num_running_reqs, num_queued_reqs, kv_usage (fraction of KV slots held by requests, 0..1),
  kv_cached_tokens (slots owned by the radix tree), kv_total_tokens, cache_hit_rate (0..1, since start),
  time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds (histograms);
  with a disk tier: kv_disk_{blocks,bytes,max_bytes,loaded_tokens,loaded_blocks,write_bytes,read_bytes,
  corrupt,write_drops,writable,writeback_blocks,writeback_skipped} (the scheduler's disk_* figures since start);
  with a host tier: kv_host_{blocks,bytes,max_bytes,loaded_tokens,hit_blocks,stored_blocks,evicted_blocks,
  spilled_blocks};
  with --speculative-algorithm: spec_{verify_passes,draft_tokens,accepted_tokens,accept_length} (since start);
  mixture-of-experts models: moe_expert_tokens_total{layer,expert} (tokens routed to the expert since start, from the
  scheduler's moe_expert_tokens) and moe_expert_share{layer,expert} (its share of the layer's routed tokens, 0..1).
"""

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5)
_MAX_TRACKED = 100_000
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


_DISK_GAUGES = {
    "blocks": "KV blocks in the disk tier", "bytes": "Bytes of the disk tier's files",
    "max_bytes": "The disk tier's size bound", "loaded_tokens": "Tokens loaded from disk into the radix tree",
    "loaded_blocks": "Blocks loaded from disk", "write_bytes": "Bytes written to the disk tier",
    "read_bytes": "Bytes read from the disk tier", "corrupt": "Torn or foreign block files found (deleted)",
    "write_drops": "Blocks not written because the write queue was full",
    "writable": "1 while the disk tier accepts writes (0 after a full or read-only disk)",
    "writeback_blocks": "Blocks queued for disk by write-back when the radix tree evicted them",
    "writeback_skipped": "Evicted blocks write-back did not write (never reused)",
}


_HOST_GAUGES = {
    "blocks": "KV blocks in the host tier", "bytes": "Bytes of the host tier's blocks",
    "max_bytes": "The host tier's size bound", "loaded_tokens": "Tokens loaded from the host tier into the radix tree",
    "hit_blocks": "Host-tier blocks found for a request", "stored_blocks": "Blocks the device evicted into the host tier",
    "evicted_blocks": "Blocks the host tier evicted (its LRU bound)",
    "spilled_blocks": "Host-tier evictions written to the disk tier",
}


_SPEC_GAUGES = {
    "verify_passes": "Forward passes that verified a speculative draft",
    "draft_tokens": "Speculative draft tokens verified", "accepted_tokens": "Speculative draft tokens accepted",
    "accept_length": "Tokens produced per verify pass (accepted drafts + 1), since start",
}


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.prompt_tokens = Counter("radixlm_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("radixlm_generation_tokens", "Generated tokens", registry=r)
        self.cached_tokens = Counter("radixlm_cached_tokens", "Prompt tokens served from the radix cache",
                                     registry=r)
        self.requests = Counter("radixlm_requests", "Finished requests", ["finish_reason"], registry=r)
        self.schema_violations = Counter("radixlm_constrained_output_violations",
                                         "Finished JSON-constrained outputs that jsonschema rejects", registry=r)
        self.running = Gauge("radixlm_num_running_reqs", "Requests in the running batch", registry=r)
        self.queued = Gauge("radixlm_num_queued_reqs", "Requests waiting to be scheduled", registry=r)
        self.kv_usage = Gauge("radixlm_kv_usage", "Fraction of KV slots held by requests (not evictable)",
                              registry=r)
        self.kv_cached = Gauge("radixlm_kv_cached_tokens", "KV slots owned by the radix tree", registry=r)
        self.kv_total = Gauge("radixlm_kv_total_tokens", "KV slots in the pool", registry=r)
        self.cache_hit_rate = Gauge("radixlm_cache_hit_rate",
                                    "Prompt tokens found in the radix cache / all admitted prompt tokens",
                                    registry=r)
        self.ttft = Histogram("radixlm_time_to_first_token_seconds", "Time to first token",
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("radixlm_inter_token_latency_seconds", "Time between output tokens",
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("radixlm_e2e_request_latency_seconds", "Request latency, arrival to finish",
                             buckets=E2E_BUCKETS, registry=r)
        self._last_token_time: dict = {}   # rid -> time of its latest output tokens
        self.disk = {name: Gauge(f"radixlm_kv_disk_{name}", text, registry=r) for name, text in _DISK_GAUGES.items()}
        self.spec = {name: Gauge(f"radixlm_spec_{name}", text, registry=r) for name, text in _SPEC_GAUGES.items()}
        self.host = {name: Gauge(f"radixlm_kv_host_{name}", text, registry=r) for name, text in _HOST_GAUGES.items()}
        # set from the scheduler's running totals at each scrape, so gauges (a Counter cannot be set)
        self.moe_tokens = Gauge("radixlm_moe_expert_tokens_total", "Tokens routed to the expert since start",
                                ["layer", "expert"], registry=r)
        self.moe_share = Gauge("radixlm_moe_expert_share", "The expert's share of its layer's routed tokens",
                               ["layer", "expert"], registry=r)

    def on_output(self, state, new_ids, now: float) -> None:
        """TokenizerManager listener: one request advanced (state has req, created, finish_reason, meta)."""
        if not getattr(state.req, "log_metrics", True):   # e.g. health probes (SGLang's log_metrics)
            return
        rid = state.req.rid
        k = len(new_ids)
        if k:
            self.generation_tokens.inc(k)
            last = self._last_token_time.get(rid)
            if last is None:
                self.ttft.observe(max(0.0, now - state.created))
            else:
                gap = max(0.0, now - last) / k
                for _ in range(k):
                    self.itl.observe(gap)
            if len(self._last_token_time) > _MAX_TRACKED:   # abandoned requests never report a finish
                self._last_token_time.clear()
            self._last_token_time[rid] = now
        if state.finish_reason is not None:
            self._last_token_time.pop(rid, None)
            meta = state.meta or {}
            self.prompt_tokens.inc(meta.get("prompt_tokens", len(state.prompt_ids)))
            self.cached_tokens.inc(meta.get("cached_tokens", 0))
            self.requests.labels(str(state.finish_reason.get("type", "unknown"))).inc()
            if "schema_violation" in state.finish_reason:
                self.schema_violations.inc()
            self.e2e.observe(max(0.0, now - state.created))

    def update_server_info(self, info: dict) -> None:
        total = info.get("max_total_num_tokens") or 0
        used = info.get("used_slots", 0)
        evictable = info.get("evictable_slots", 0)
        self.running.set(info.get("num_running_reqs", 0))
        self.queued.set(info.get("num_waiting_reqs", 0))
        self.kv_total.set(total)
        self.kv_cached.set(info.get("tree_slots", 0))
        self.kv_usage.set((used - evictable) / total if total else 0.0)
        hit, miss = info.get("cached_prompt_tokens", 0), info.get("prefill_tokens", 0)
        self.cache_hit_rate.set(hit / (hit + miss) if hit + miss else 0.0)
        for layer, row in (info.get("moe_expert_tokens") or {}).items():
            total = sum(row)
            for expert, tokens in enumerate(row):
                self.moe_tokens.labels(str(layer), str(expert)).set(tokens)
                self.moe_share.labels(str(layer), str(expert)).set(tokens / total if total else 0.0)
        for prefix, gauges in (("disk_", self.disk), ("spec_", self.spec), ("host_", self.host)):
            for name, gauge in gauges.items():
                if prefix + name in info:
                    gauge.set(float(info[prefix + name]))

    def render(self) -> bytes:
        return generate_latest(self.registry)
