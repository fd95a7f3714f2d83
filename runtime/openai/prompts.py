"""OpenAI request bodies -> prompt token ids, off the event loop, bounded before any work.

Before the body is validated (pydantic builds every message on the loop): lists that cannot fit the
context are refused (messages, content parts, prompts of token ids).  Chat: the characters of every
content, name and tool-call argument, plus the tool definitions, are counted on the loop, then the
chat template is rendered and tokenized on the tokenizer thread.  Completions: every text prompt is
checked on characters, then tokenized there (TokenizerManager.encode).
"""

import orjson

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.tool_calls.prompt import chat_prompt_ids


def _text_chars(content) -> int:
    if isinstance(content, list):
        return sum(len(p.text or "") for p in content)
    return len(content or "")


def chat_chars(req) -> int:
    """Characters the template will be given (what a rendered prompt cannot be shorter than)."""
    total = 0
    for m in req.messages:
        total += _text_chars(m.content) + len(m.name or "") + len(m.tool_call_id or "")
        calls = [c.function for c in m.tool_calls or []] + ([m.function_call] if m.function_call else [])
        for f in calls:
            args = f.arguments if isinstance(f.arguments, str) else orjson.dumps(f.arguments)
            total += len(f.name) + len(args)
    for extra in (req.tools, req.functions):
        if extra:
            total += len(orjson.dumps(extra, default=str))
    return total


def check_chat_body(tm, body: dict) -> None:
    """400 for more messages, or content parts, than the context has tokens (raw body, before parsing)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return
    if len(msgs) >= tm.context_len:
        raise APIError(400, f"{len(msgs)} messages cannot fit this model's context of {tm.context_len} tokens "
                            f"(every message takes at least one)", param="messages")
    parts = sum(len(m["content"]) for m in msgs if isinstance(m, dict) and isinstance(m.get("content"), list))
    if parts >= tm.context_len:
        raise APIError(400, f"the messages have {parts} content parts; at most {tm.context_len - 1} (the "
                            f"context length in tokens)", param="messages")


def check_completion_body(tm, body: dict, max_prompts: int) -> None:
    """400 for more prompts than max_prompts or a token-id prompt longer than the context (raw body)."""
    p = body.get("prompt")
    if not isinstance(p, list):
        return
    flat = bool(p) and isinstance(p[0], int)          # one prompt of token ids
    if len(p) > max_prompts and not flat:
        raise APIError(400, f"{len(p)} prompts; at most {max_prompts}", param="prompt")
    for i, ids in enumerate([p] if flat else p):
        if isinstance(ids, list) and len(ids) >= tm.context_len:
            raise APIError(400, f"prompt {i} has {len(ids)} tokens, which does not fit this model's context "
                                f"length of {tm.context_len} tokens", param="prompt")


def check_chat_size(tm, req) -> None:
    """400 for a chat too long for the context whatever its tokens: checked before rendering."""
    chars = chat_chars(req)
    if chars > tm.max_prompt_chars:
        raise APIError(400, f"the messages have {chars} characters; this server refuses prompts over "
                            f"{tm.max_prompt_chars} characters before rendering them", param="messages")


def load_chat_template(path: str) -> str:
    """The text of a --chat-template file; ValueError naming the path when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"--chat-template {path!r} cannot be read: {exc.strerror}") from None


async def chat_ids(tm, req, tool_format, tools, choice, generated, template_kwargs=None) -> list:
    check_chat_size(tm, req)
    return await tm.run_blocking(chat_prompt_ids, tm.tokenizer, req.messages, tool_format, tools, choice,
                                 generated, template_kwargs)


async def completion_prompts(tm, req) -> list:
    """[(text or None, ids)] for each prompt; 400 for an empty list or a text too long to tokenize."""
    p = req.prompt
    if isinstance(p, str):
        items = [p]
    elif p and all(isinstance(x, int) for x in p):
        items = [list(p)]
    else:
        items = list(p)
    if not items:
        raise APIError(400, "prompt is an empty list", param="prompt")
    texts = [x for x in items if isinstance(x, str)]
    try:
        encoded = iter(await tm.encode(texts))
    except ValueError as exc:
        raise APIError(400, str(exc), param="prompt") from None
    return [(x, next(encoded)) if isinstance(x, str) else (None, list(x)) for x in items]
