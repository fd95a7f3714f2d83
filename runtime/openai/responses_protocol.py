"""/v1/responses request bodies: the pydantic model (unknown fields refused, as on the other OpenAI
routes), and the `input` items turned into the chat messages that chat templates take.

Input items: a string (one user message); messages (`{"role", "content"}` with or without
`"type": "message"`, content a string or input_text / output_text parts); `function_call` items (an
assistant's call: call_id, name, arguments); `function_call_output` items (the tool's result); `reasoning`
items (a thinking model's reasoning, its reasoning_text content or summary, sent back with the turn).
Consecutive assistant messages and function calls are one assistant turn, so a turn this server
generated comes back as the same (content, calls) and re-encodes to its generated tokens.
Every bad item gets a 400 naming it (`input.3.arguments`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.protocol import ChatMessage, FunctionCall, ToolCall
from radixlm.runtime.openai.protocol import parse as parse  # noqa: F401  (re-exported)

MAX_TOP_LOGPROBS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[Dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class TextConfig(_Strict):
    format: Optional[TextFormat] = None
    verbosity: Optional[str] = None          # no effect


class ResponsesRequest(_Strict):
    model: Optional[str] = None
    input: Union[str, List[Dict[str, Any]]]
    instructions: Optional[str] = None
    tools: Optional[List[Any]] = None
    tool_choice: Optional[Any] = None
    parallel_tool_calls: Optional[bool] = None
    max_output_tokens: Optional[int] = Field(None, ge=1)
    max_tool_calls: Optional[int] = Field(None, ge=0)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False
    store: Optional[bool] = None             # default true: kept for previous_response_id and GET
    previous_response_id: Optional[str] = None
    text: Optional[TextConfig] = None
    include: Optional[List[str]] = None      # "message.output_text.logprobs" returns logprobs; others no effect
    metadata: Optional[Dict[str, Any]] = None
    truncation: Optional[Literal["auto", "disabled"]] = None
    # refused unless left at their defaults
    background: Optional[bool] = None
    conversation: Optional[Any] = None
    prompt: Optional[Any] = None
    context_management: Optional[List[Any]] = None
    # accepted, no effect here
    user: Optional[str] = None
    service_tier: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[str] = None
    prompt_cache_options: Optional[Any] = None
    reasoning: Optional[Dict[str, Any]] = None   # effort: a thinking budget (reasoning/request.py); summary: no effect
    stream_options: Optional[Dict[str, Any]] = None
    # SGLang extras (the SDK's extra_body puts them at the top level)
    seed: Optional[int] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    repetition_penalty: Optional[float] = None
    stop: Optional[Union[str, List[str]]] = None
    ignore_eos: Optional[bool] = None
    cache_salt: Optional[str] = Field(None, min_length=1)   # as the chat route's: only the same salt shares KV
    chat_template_kwargs: Optional[Dict[str, Any]] = None   # as the chat route's (enable_thinking: false)
    max_thinking_tokens: Optional[int] = Field(None, ge=0)  # thinking budget (wins over reasoning.effort)


def refuse_unsupported(req: ResponsesRequest) -> None:
    for name, ok in (("background", not req.background), ("conversation", req.conversation is None),
                     ("prompt", req.prompt is None), ("context_management", not req.context_management)):
        if not ok:
            raise APIError(400, f"{name} is not supported by this server", param=name)
    if req.truncation == "auto":
        raise APIError(400, "truncation 'auto' is not supported: an input longer than the context gets a 400",
                       param="truncation")


# ---- input items -> chat messages ----

_ROLES = ("user", "system", "developer", "assistant")


def _text_of(content, param: str, kinds: tuple) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{param} must be a string or a list of content parts", param=param)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds or not isinstance(part.get("text"), str):
            raise APIError(400, f"{param}.{j}: only text content parts ({', '.join(kinds)}) are supported, "
                                f"got {kind!r}", param=f"{param}.{j}")
        out.append(part["text"])
    return "".join(out)


def _arguments(item: dict, param: str) -> str:
    args = item.get("arguments")
    if not isinstance(args, str):
        raise APIError(400, f"{param} must be a JSON string", param=param)
    try:
        parsed = json.loads(args)
    except ValueError as exc:
        raise APIError(400, f"{param} is not valid JSON: {exc}", param=param) from None
    if not isinstance(parsed, dict):
        raise APIError(400, f"{param} must be a JSON object, got {args!r}", param=param)
    return args


def _required_str(item: dict, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise APIError(400, f"missing required field '{param}.{key}'", param=f"{param}.{key}")
    return value


class _Turn:
    """The assistant turn being gathered: its text and calls."""

    def __init__(self):
        self.texts, self.calls, self.reasoning = [], [], []

    def message(self) -> ChatMessage:
        content = "".join(self.texts)
        return ChatMessage(role="assistant", content=content or None, tool_calls=self.calls or None,
                           reasoning_content="".join(self.reasoning) if self.reasoning else None)


def _reasoning_text(item: dict, param: str) -> str:
    """A reasoning item's text: its reasoning_text content, else its summary texts."""
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list):
        raise APIError(400, f"{param}.content must be a list of reasoning_text parts", param=f"{param}.content")
    return _text_of(parts, f"{param}.content", ("reasoning_text", "summary_text"))


def input_messages(items, call_names: Optional[dict] = None) -> list:
    """[ChatMessage] of a request's `input`; call_names (call_id -> name, of earlier turns) is
    extended with this input's calls and names the tool results."""
    if isinstance(items, str):
        return [ChatMessage(role="user", content=items)]
    names = call_names if call_names is not None else {}
    out, turn = [], None
    for k, item in enumerate(items):
        param = f"input.{k}"
        kind = item.get("type", "message")
        is_assistant = kind in ("function_call", "reasoning") or (kind == "message" and item.get("role") == "assistant")
        if turn is not None and not is_assistant:
            out.append(turn.message())
            turn = None
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise APIError(400, f"{param}.role must be one of {', '.join(_ROLES)}, got {role!r}",
                               param=f"{param}.role")
            if role == "assistant":
                turn = turn or _Turn()
                turn.texts.append(_text_of(item.get("content"), f"{param}.content",
                                           ("output_text", "input_text", "text", "refusal")))
            else:
                text = _text_of(item.get("content"), f"{param}.content", ("input_text", "text", "output_text"))
                out.append(ChatMessage(role=role, content=text))
        elif kind == "function_call":
            call_id = _required_str(item, "call_id", param)
            name = _required_str(item, "name", param)
            args = _arguments(item, f"{param}.arguments")
            names[call_id] = name
            turn = turn or _Turn()
            turn.calls.append(ToolCall(id=call_id, function=FunctionCall(name=name, arguments=args)))
        elif kind == "reasoning":
            turn = turn or _Turn()
            turn.reasoning.append(_reasoning_text(item, param))
        elif kind == "function_call_output":
            call_id = _required_str(item, "call_id", param)
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output, f"{param}.output", ("input_text",))
            out.append(ChatMessage(role="tool", tool_call_id=call_id, content=text, name=names.get(call_id)))
        else:
            raise APIError(400, f"{param}: input items of type {kind!r} are not supported (messages, function_call, "
                                f"function_call_output and reasoning are)", param=f"{param}.type")
    if turn is not None:
        out.append(turn.message())
    return out


def output_messages(output: list) -> list:
    """The assistant turn of a response's output items, as chat messages (for previous_response_id)."""
    turn = _Turn()
    for item in output:
        if item["type"] == "message":
            turn.texts.append("".join(p["text"] for p in item["content"]))
        elif item["type"] == "reasoning":
            turn.reasoning.append("".join(p["text"] for p in item["content"]))
        elif item["status"] == "completed":        # a call cut by max_output_tokens is not sent back
            turn.calls.append(ToolCall(id=item["call_id"],
                                       function=FunctionCall(name=item["name"], arguments=item["arguments"])))
    return [turn.message()] if (turn.texts or turn.calls or turn.reasoning) else []
