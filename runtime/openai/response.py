"""Native results (`{"text", "meta_info": ...}`) shaped as OpenAI response fields: finish reasons,
usage, logprobs in the chat and legacy completions layouts, the assistant message."""

import json
import uuid
from typing import Optional

from radixlm.runtime.api.http import APIError
from radixlm.runtime.api.token_bytes import token_bytes

JSON_OBJECT_SCHEMA = json.dumps({"type": "object"})   # response_format json_object, as SGLang maps it
_MASK63 = (1 << 63) - 1


def finish_reason(out) -> Optional[str]:
    reason = out["meta_info"].get("finish_reason")
    if reason is None:
        return None
    if reason.get("type") == "abort":
        status = reason.get("status_code") or 500
        raise APIError(status, reason.get("message") or "the request was aborted",
                       code="service_unavailable" if status == 503 else None)
    return "length" if reason.get("type") == "length" else "stop"


def matched_stop(out):
    """SGLang's choice extension: the stop string or token id that ended the output; None otherwise."""
    reason = out["meta_info"].get("finish_reason") or {}
    return reason.get("matched") if reason.get("type") == "stop" else None


def matched_stop_field(out, reason) -> dict:
    """matched_stop for a stream choice: on the choice that finishes the output only."""
    return {"matched_stop": matched_stop(out)} if reason else {}


def choice_sampling_params(sp: dict, prompts: int, n: int):
    """Sampling params of the prompts x n native requests: with a seed and n > 1, choice j draws with its
    own seed derived from (seed, j), so the choices differ and the same seed gives the same set."""
    if n == 1 or sp.get("seed") is None:
        return sp
    seeds = [sp["seed"] if j == 0 else (sp["seed"] + j * 0x9E3779B97F4A7C15) & _MASK63 for j in range(n)]
    return [{**sp, "seed": seed} for _ in range(prompts) for seed in seeds]


def usage(outs: list, n: int, cached_override: Optional[list] = None) -> dict:
    firsts = outs[::n]
    prompt = sum(o["meta_info"]["prompt_tokens"] for o in firsts)
    completion = sum(o["meta_info"]["completion_tokens"] for o in outs)
    cached = sum(cached_override) if cached_override is not None else \
        sum(o["meta_info"].get("cached_tokens", 0) for o in firsts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": None},
            "completion_tokens_details": None}


def token_entry(triple, tokenizer=None) -> dict:
    """A chat logprob entry; bytes are the token's raw bytes (a token ending inside a UTF-8 character
    shows as U+FFFD in `token`, not in `bytes`)."""
    lp, token_id, text = triple
    text = text or ""
    return {"token": text, "logprob": lp, "bytes": token_bytes(tokenizer, token_id, text)}


def chat_logprobs(meta: dict, start: int = 0, tokenizer=None) -> dict:
    toks = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    content = []
    for i in range(start, len(toks)):
        top = tops[i] if i < len(tops) and tops[i] else []
        content.append({**token_entry(toks[i], tokenizer), "top_logprobs": [token_entry(t, tokenizer) for t in top]})
    return {"content": content, "refusal": None}


def completion_logprobs(meta: dict, prompt_chars: int, echo: bool, start: int = 0) -> dict:
    """Legacy completions logprobs for output tokens [start:] (plus the prompt's when echo), with
    text_offset counted in the full text (prompt + output)."""
    rows = []   # (triple, top, offset)
    if echo:
        offset = 0
        for triple, top in zip(meta.get("input_token_logprobs") or [], meta.get("input_top_logprobs") or []):
            rows.append((triple, top, offset))
            offset += len(triple[2] or "")
    offset = prompt_chars
    toks, tops = meta.get("output_token_logprobs") or [], meta.get("output_top_logprobs") or []
    for i, triple in enumerate(toks):
        if i >= start:
            rows.append((triple, tops[i] if i < len(tops) else None, offset))
        offset += len(triple[2] or "")
    return {"tokens": [t[2] or "" for t, _, _ in rows], "token_logprobs": [t[0] for t, _, _ in rows],
            "top_logprobs": [{(x[2] or ""): x[0] for x in top} if top else None for _, top, _ in rows],
            "text_offset": [o for _, _, o in rows]}


def message(text: str) -> dict:
    return {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
            "function_call": None, "tool_calls": None}


def reasoning_deltas(reasoning: str, calls: list) -> list:
    """Stream delta bodies for a choice's new reasoning text and its whole channel tool calls (harmony)."""
    bodies = [{"reasoning_content": reasoning}] if reasoning else []
    return bodies + [{"tool_calls": [{"index": k, **call}]} for k, call in enumerate(channel_calls(calls))]


def channel_calls(calls: list) -> list:
    """[(name, arguments text)] -> OpenAI tool_calls entries with fresh ids."""
    return [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": {"name": n, "arguments": a}}
            for n, a in calls]
