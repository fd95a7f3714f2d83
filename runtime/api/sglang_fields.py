"""SGLang's request schema, field by field: what radixlm does with each (plain Python, no torch).

Two tables, one per SGLang class: `GENERATE_FIELDS` (`GenerateReqInput`, the /generate body) and
`SAMPLING_FIELDS` (`SamplingParams`, its `sampling_params`).  Each field has a status:

    implemented   radixlm honours it (GenerateReqInput / SamplingParams carry it)
    no_effect     accepted with any value of the right shape; it changes nothing here (logged once
                  at debug level), e.g. routing and logging hints meant for a gateway or a cluster
    default_only  accepted at its default value (null, false, 0, [] ... as SGLang's own defaults, or a
                  list of them for a batch); any other value is a 400 that names the field and says why

A name in neither table is a 400 that names it.  `extra` entries are names radixlm adds (its own
extensions) or that SGLang's gateway adds to every body it forwards (`model`).
tests/runtime/test_sglang_fields.py compares the tables with the installed `sglang` package.
"""

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

IMPLEMENTED, NO_EFFECT, DEFAULT_ONLY = "implemented", "no_effect", "default_only"


@dataclass(frozen=True)
class FieldRule:
    status: str
    why: str = ""                 # for no_effect / default_only: what it would do in SGLang, why not here
    defaults: tuple = ()          # default_only: the values (besides null and empty) that count as default
    extra: bool = False           # not an SGLang field: a radixlm extension or a gateway addition


def _impl(why: str = "", extra: bool = False) -> FieldRule:
    return FieldRule(IMPLEMENTED, why, extra=extra)


def _noop(why: str, extra: bool = False) -> FieldRule:
    return FieldRule(NO_EFFECT, why, extra=extra)


def _only(why: str, *defaults) -> FieldRule:
    return FieldRule(DEFAULT_ONLY, why, tuple(defaults))


_MM = "multimodal input: radixlm serves text-only models"
_PD = "prefill/decode disaggregation: radixlm runs prefill and decode in one server"
_DP = "data-parallel routing: this server is a single data-parallel rank (0)"

GENERATE_FIELDS: dict = {
    "rid": _impl("a string, or one per prompt for a batch (distinct)"),
    "text": _impl(), "input_ids": _impl(), "sampling_params": _impl("one object, or one per prompt"),
    "return_logprob": _impl(), "logprob_start_len": _impl(), "top_logprobs_num": _impl(),
    "token_ids_logprob": _only("logprobs of chosen token ids are not computed by radixlm's model runner"),
    "return_text_in_logprobs": _impl(), "stream": _impl(),
    "log_metrics": _impl("false keeps the request out of /metrics (health probes send it)"),
    "priority": _noop("accepted and ordering-neutral: the waiting queue is ordered by prefix match and age"),
    "extra_key": _impl("cache namespace: requests with different keys never share KV nor cache hits"),
    "cache_salt": _impl("cache namespace, combined with extra_key"),
    "routing_key": _noop("a hint for a routing-key schedule policy across workers; one worker here"),
    "session_id": _noop("identity shared by a session's requests; it does not alter the prompt"),
    "conversation_id": _noop("tracking id; radixlm does not track conversations"),
    "custom_labels": _noop("metric labels; radixlm's /metrics has no per-request labels"),
    "no_logs": _noop("radixlm does not log request contents"),
    "background": _noop("OpenAI Responses API background mode; /generate always answers the request"),
    "external_trace_header": _noop("tracing context; radixlm has no tracing"),
    "received_time": _noop("a client-side timestamp for SGLang's latency metrics"),
    "http_worker_ipc": _noop("SGLang-internal multi-tokenizer routing"),
    "kv_hints": _noop("hints for hierarchical-cache storage backends; radixlm has none"),
    "return_prompt_token_ids": _only("prompt token ids are returned as meta_info.prompt_tokens count only",
                                     False),
    "return_hidden_states": _only("hidden states are not returned by radixlm", False),
    "return_routed_experts": _only("radixlm serves no mixture-of-experts models", False),
    "routed_experts_start_len": _only("radixlm serves no mixture-of-experts models", 0),
    "return_indexer_topk": _only("radixlm has no sparse-attention indexer", False),
    "return_entropy": _only("per-token entropy is not computed", False),
    "return_bytes": _only("image generation output", False),
    "return_sampling_mask": _only("the sampling support is not returned", False),
    "sampling_logprobs_mode": _only("the sampling support is not returned"),
    "return_flat_raw_top_logprobs": _only("top logprobs come as nested lists only", False),
    "return_flat_raw_output_top_logprobs": _only("top logprobs come as nested lists only", False),
    "return_flat_raw_top_logprobs_b64": _only("top logprobs come as nested lists only", False),
    "watermark": _only("output watermarking is not implemented"),
    "session_params": _only("SGLang sessions (continual prompting) are not implemented"),
    "lora_path": _only("LoRA adapters are not supported"), "lora_id": _only("LoRA adapters are not supported"),
    "custom_logit_processor": _only("custom logit processors are not supported (they run pickled code)"),
    "positional_embed_overrides": _only("embedding overrides are not supported"),
    "require_reasoning": _only("no hybrid reasoning models", False),
    "max_thinking_tokens": _only("no thinking budget enforcement"),
    "multi_item_delimiter_indices": _only("multi-item scoring is not implemented"),
    "token_indices_to_pool": _only("setwise pooling is not implemented"),
    "routed_dp_rank": _only(_DP, 0), "data_parallel_rank": _only(_DP, 0), "disagg_prefill_dp_rank": _only(_DP, 0),
    "bootstrap_host": _only(_PD), "bootstrap_port": _only(_PD), "bootstrap_room": _only(_PD),
    "bootstrap_pair_key": _only(_PD), "decode_tp_size": _only(_PD),
    "input_embeds": _only(_MM), "image_data": _only(_MM), "video_data": _only(_MM), "audio_data": _only(_MM),
    "mm_hashes": _only(_MM), "mm_content_hashes": _only(_MM), "use_audio_in_video": _only(_MM, False),
    "video_config": _only(_MM), "modalities": _only(_MM), "need_wait_for_mm_inputs": _only(_MM, False),
    "num_items_assigned": _only(_MM), "encoder_urls": _only(_MM), "max_dynamic_patch": _only(_MM),
    "min_dynamic_patch": _only(_MM), "image_max_dynamic_patch": _only(_MM), "video_max_dynamic_patch": _only(_MM),
    "images_config": _only(_MM), "mm_processor_kwargs": _only(_MM),
    "model": _noop("SGLang's gateway adds the model name to every body it forwards; one model here", extra=True),
}

SAMPLING_FIELDS: dict = {
    **{name: _impl() for name in (
        "max_new_tokens", "stop", "stop_token_ids", "temperature", "top_p", "min_p", "frequency_penalty",
        "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex", "ebnf",
        "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
        "logit_bias", "sampling_seed")},
    "top_k": _impl("-1 or SGLang's 1 << 30 mean the whole vocabulary"),
    "stop_regex": _impl("a pattern or a list; stops where Python's re.search first matches the output text"),
    "custom_params": _noop("inputs for custom logit processors, which radixlm does not run"),
    "stream_interval": _noop("radixlm streams every scheduler step"),
    "beam_width": _only("beam search is not implemented", 1),
    "watermark": _only("output watermarking is not implemented"),
    "stop_strs": _only("SGLang-internal (set from stop)"),
    "stop_regex_strs": _only("SGLang-internal (set from stop_regex)"),
    "stop_str_max_len": _only("SGLang-internal", 0), "stop_regex_max_len": _only("SGLang-internal", 0),
    "is_normalized": _only("SGLang-internal", False), "ebnf_full_assistant": _only("SGLang-internal", False),
    "seed": _impl("radixlm's alias of sampling_seed", extra=True),
    "jump_forward": _impl("radixlm: false turns grammar jump-forward off for this request", extra=True),
    "speculative": _impl("radixlm: false opts this request out of --speculative-algorithm drafts", extra=True),
    "think_end_ids": _impl("radixlm: the output starts inside a thinking block that these ids end; a grammar "
                           "applies after them", extra=True),
    "max_thinking_tokens": _impl("radixlm: with think_end_ids, the thinking ends (the ids are forced) after "
                                 "this many output tokens", extra=True),
}

_logged: set = set()


def is_default(value: Any, rule: FieldRule) -> bool:
    """null, an empty list/object, one of rule.defaults, or a list (a batch) of such values."""
    if value is None or (isinstance(value, (list, dict)) and not value):
        return True
    if isinstance(value, list):
        return all(is_default(v, rule) for v in value)
    return any(type(value) is type(d) and value == d for d in rule.defaults)


def check_compat(values: dict, table: dict, where: str) -> None:
    """Check the no_effect / default_only entries of one request part (`where` names it in messages):
    ValueError for an unknown name or a non-default value of a default_only field."""
    unknown = sorted(str(k) for k in values if k not in table)
    if unknown:
        raise ValueError(f"unknown {where} field(s): {', '.join(unknown)}")
    for name, value in values.items():
        rule = table[name]
        if rule.status == DEFAULT_ONLY and not is_default(value, rule):
            raise ValueError(f"{where} field {name}={value!r} is not supported: {rule.why}; "
                             f"send it at its default or leave it out")
        if rule.status != IMPLEMENTED and not is_default(value, rule) and (where, name) not in _logged:
            _logged.add((where, name))
            logger.debug("%s field %s accepted with no effect: %s", where, name, rule.why)


def split_fields(body: dict, table: dict, implemented: set) -> tuple:
    """(implemented, compat, unknown) parts of a dict; null values are dropped from all three."""
    impl, compat, unknown = {}, {}, {}
    for key, value in body.items():
        if value is None:
            continue
        if key in implemented:
            impl[key] = value
        elif key in table:
            compat[key] = value
        else:
            unknown[key] = value
    return impl, compat, unknown
