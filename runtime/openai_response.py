"""Native results (`{"text", "meta_info": ...}`) shaped as OpenAI response fields: finish reasons,
usage, logprobs in the chat and legacy completions layouts, the assistant message."""

from typing import Optional

from radixlm.runtime.http_common import APIError


def finish_reason(out) -> Optional[str]:
    reason = out["meta_info"].get("finish_reason")
    if reason is None:
        return None
    if reason.get("type") == "abort":
        status = reason.get("status_code") or 500
        raise APIError(status, reason.get("message") or "the request was aborted",
                       code="service_unavailable" if status == 503 else None)
    return "length" if reason.get("type") == "length" else "stop"


def usage(outs: list, n: int, cached_override: Optional[list] = None) -> dict:
    firsts = outs[::n]
    prompt = sum(o["meta_info"]["prompt_tokens"] for o in firsts)
    completion = sum(o["meta_info"]["completion_tokens"] for o in outs)
    cached = sum(cached_override) if cached_override is not None else \
        sum(o["meta_info"].get("cached_tokens", 0) for o in firsts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": None},
            "completion_tokens_details": None}


def token_entry(triple) -> dict:
    lp, _, text = triple
    text = text or ""
    return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(meta: dict, start: int = 0) -> dict:
    toks = meta.get("output_token_logprobs") or []
    tops = meta.get("output_top_logprobs") or []
    content = []
    for i in range(start, len(toks)):
        top = tops[i] if i < len(tops) and tops[i] else []
        content.append({**token_entry(toks[i]), "top_logprobs": [token_entry(t) for t in top]})
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
