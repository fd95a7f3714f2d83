"""Chat messages (tool calls and tool results included) -> prompt token ids.

Each message becomes the dict chat templates take.  An assistant turn this server generated (found
in `GeneratedCalls` by its call ids, with the same calls, content and reasoning) is not re-rendered: the
template renders a placeholder there, and the placeholder's place gets the very token ids that
were generated, so the radix cache matches the whole previous turn.  A turn sent back with its
reasoning is reused so only where the template keeps that reasoning (a probe render shows it: Qwen3
keeps it after the last user query, DeepSeek-R1 never); elsewhere the template renders it as it decides.
"""

from __future__ import annotations

import json

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.tool_calls import generic_json
from radixlm.runtime.openai.tool_calls.history import GeneratedCalls

_PLACEHOLDER = "\u2063radixlm-generated-{}\u2063"
_REASONING_PROBE = "\u2063radixlm-reasoning-{}\u2063"


def _content(m, i: int) -> str:
    if isinstance(m.content, list):
        bad = [p.type for p in m.content if p.type != "text" or p.text is None]
        if bad:
            raise APIError(400, f"messages[{i}]: only text content parts are supported, got '{bad[0]}'",
                           param=f"messages.{i}.content")
        return "".join(p.text for p in m.content)
    return m.content or ""


def history_calls(m, i: int) -> list:
    """[(id, name, arguments dict)] of an assistant message; 400 when arguments are not JSON objects."""
    calls = [(c.id, c.function.name, c.function.arguments, f"messages.{i}.tool_calls.{j}.function.arguments")
             for j, c in enumerate(m.tool_calls or [])]
    if m.function_call is not None:
        calls.append((None, m.function_call.name, m.function_call.arguments, f"messages.{i}.function_call.arguments"))
    out = []
    for call_id, name, args, param in calls:
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError as exc:
            raise APIError(400, f"{param} is not valid JSON: {exc}", param=param) from None
        if not isinstance(parsed, dict):
            raise APIError(400, f"{param} must be a JSON object, got {args!r}", param=param)
        out.append((call_id, name, parsed))
    return out


def _message(m, i: int, fmt) -> dict:
    role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
    out = {"role": role, "content": _content(m, i)}
    if m.role == "assistant" and m.reasoning_content is not None:
        out["reasoning_content"] = m.reasoning_content
    if m.role == "tool" and m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role in ("tool", "function"):
        out["name"] = m.name
    calls = history_calls(m, i) if m.role == "assistant" else []
    if calls and fmt is generic_json:
        out["content"] += generic_json.calls_text([(n, a) for _, n, a in calls])
    elif calls:
        out["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                             for cid, n, a in calls]
    return out


def template_messages(req_messages, fmt, tools: list, choice, store: GeneratedCalls):
    """(messages for the template, {placeholder: generated ids}, [(message, generated ids)] of the turns
    sent back with their reasoning, which are reused only where the template keeps it)."""
    messages, verbatim, with_reasoning = [], {}, []
    for i, m in enumerate(req_messages):
        reasoning = m.reasoning_content if m.role == "assistant" else None
        ids = store.lookup(history_calls(m, i), _content(m, i), reasoning or "") if m.role == "assistant" else None
        if ids is not None and not reasoning:
            key = _PLACEHOLDER.format(len(verbatim))
            verbatim[key] = ids
            messages.append({"role": "assistant", "content": key})
        else:
            messages.append(_message(m, i, fmt))
            if ids is not None:
                with_reasoning.append((messages[-1], ids))
    if fmt is generic_json and tools:
        prompt = generic_json.system_prompt(tools)
        if messages[0]["role"] == "system":
            messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + prompt}
        else:
            messages.insert(0, {"role": "system", "content": prompt})
    return messages, verbatim, with_reasoning


def _keeps_reasoning(tokenizer, messages: list, with_reasoning: list, verbatim: dict, kwargs: dict) -> None:
    """Each turn in with_reasoning whose reasoning the template renders becomes a placeholder for its
    generated ids (in messages and verbatim)."""
    probes = [{**msg, "reasoning_content": _REASONING_PROBE.format(k)} for k, (msg, _) in enumerate(with_reasoning)]
    swap = {id(msg): probe for (msg, _), probe in zip(with_reasoning, probes)}
    text = _render(tokenizer, [swap.get(id(m), m) for m in messages], kwargs)
    for k, (msg, ids) in enumerate(with_reasoning):
        if _REASONING_PROBE.format(k) in text:
            key = _PLACEHOLDER.format(len(verbatim))
            verbatim[key] = ids
            at = next(j for j, m in enumerate(messages) if m is msg)
            messages[at] = {"role": "assistant", "content": key}


def _render(tokenizer, messages: list, kwargs: dict) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    except Exception as exc:
        raise APIError(400, f"the chat template rejected the messages: {exc}", param="messages") from None


def encode_with_verbatim(tokenizer, text: str, verbatim: dict) -> list:
    """Token ids of text, each placeholder replaced by its ids (the text that follows a placeholder
    loses the end-of-turn marker those ids already end with)."""
    ids, rest = [], text
    for key, gen_ids in verbatim.items():
        before, _, rest = rest.partition(key)
        ids += tokenizer.encode(before, add_special_tokens=False) + list(gen_ids)
        if gen_ids and gen_ids[-1] in set(tokenizer.all_special_ids):
            marker = tokenizer.decode(gen_ids[-1:], skip_special_tokens=False)
            if rest.startswith(marker):
                rest = rest[len(marker):]
    return ids + tokenizer.encode(rest, add_special_tokens=False)


def chat_prompt_ids(tokenizer, req_messages, fmt, tools: list, choice, store: GeneratedCalls,
                    template_kwargs: dict = None) -> list:
    """template_kwargs: the client's chat_template_kwargs (e.g. enable_thinking), checked by the caller."""
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, "this model has no chat template; use /v1/completions", param="messages")
    messages, verbatim, with_reasoning = template_messages(req_messages, fmt, tools, choice, store)
    kwargs = {**(template_kwargs or {}), **fmt.template_kwargs(tools)}   # whatever the choice: same prefix
    if with_reasoning:
        _keeps_reasoning(tokenizer, messages, with_reasoning, verbatim, kwargs)
    return encode_with_verbatim(tokenizer, _render(tokenizer, messages, kwargs), verbatim)
