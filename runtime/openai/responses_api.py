"""/v1/responses (OpenAI's Responses API) on the chat path: the input items become chat messages
(openai_responses_protocol.py), rendered and tool-constrained exactly as /v1/chat/completions does
(runtime/openai/tool_calls/: the same formats, structural-tag grammar and generated-turn store, so a call
sent back as a function_call item re-encodes to the tokens that were generated); the output becomes
message and function_call items (openai_responses_output.py), whole or as the SSE events the openai
SDK's ResponseStream parses.

    POST   /v1/responses          create (stream or not); previous_response_id continues a stored one
    GET    /v1/responses/{id}     a stored response
    DELETE /v1/responses/{id}

Stored responses (store, default true) live in a bounded in-memory LRU: each keeps its own input and
output messages and its predecessor's id, so a chain is rebuilt by walking back; instructions are not
carried over (as in OpenAI's API).  A stored response belongs to the API key that made it: another key's
GET, DELETE or previous_response_id finds nothing (as if it had never been stored).  The request itself
carries the caller (rids scoped per key; its cache namespace under --cache-isolation per-key) and
cache_salt, as the chat route's do.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from types import SimpleNamespace
from typing import Optional

import orjson
from fastapi import FastAPI, Request

import radixlm.runtime.openai.response as shape
from radixlm.constrained.backend import BUILTIN_JSON
from radixlm.runtime.api.client_scope import caller_of
from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.api.http import APIError, SSEResponse, first_of, json_response, last_of, or_disconnect, read_json
from radixlm.runtime.api.request_flow import run_generate
from radixlm.runtime.openai.prompts import chat_ids
from radixlm.runtime.openai.protocol import ChatMessage, check_model
from radixlm.runtime.openai.reasoning import choose_reasoning
from radixlm.runtime.openai.reasoning import request as reasoning_request
from radixlm.runtime.openai.reasoning.shape import ChoiceReasoning
from radixlm.runtime.openai.responses_output import OutputBuilder, new_id
from radixlm.runtime.openai.responses_protocol import (
    ResponsesRequest,
    input_messages,
    output_messages,
    parse,
    refuse_unsupported,
)
from radixlm.runtime.openai.tool_calls import choose_format
from radixlm.runtime.openai.tool_calls.history import GeneratedCalls
from radixlm.runtime.openai.tool_calls.request import (
    add_tool_grammar,
    check_tools_fit,
    parse_response_choice,
    parse_response_tools,
)
from radixlm.runtime.openai.tool_calls.shape import ChoiceTools

logger = logging.getLogger(__name__)
MAX_STORED = 1024                 # responses kept for previous_response_id / GET
MAX_STORED_CHARS = 64 << 20       # and at most this much message text in all


# ---- the store ----

class ResponseStore:
    """Bounded LRU of stored responses: id -> (response object, its messages, previous id, chars, owner).
    owner: the index of the API key that stored it (client_scope.Caller.key; None without keys); a
    lookup by another owner finds nothing."""

    def __init__(self, max_items: int = MAX_STORED, max_chars: int = MAX_STORED_CHARS):
        self.max_items, self.max_chars = max_items, max_chars
        self._items: OrderedDict = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response: dict, messages: list, previous: Optional[str], owner: Optional[int] = None) -> None:
        chars = sum(len(m.model_dump_json()) for m in messages) + len(orjson.dumps(response))
        with self._lock:
            self._items[response["id"]] = (response, messages, previous, chars, owner)
            self._chars += chars
            while self._items and (len(self._items) > self.max_items or self._chars > self.max_chars):
                _, old = self._items.popitem(last=False)
                self._chars -= old[3]

    def _find(self, rid: str, owner: Optional[int]):
        found = self._items.get(rid)
        return found if found is not None and found[4] == owner else None

    def get(self, rid: str, owner: Optional[int] = None):
        with self._lock:
            found = self._find(rid, owner)
            if found is not None:
                self._items.move_to_end(rid)
            return found

    def delete(self, rid: str, owner: Optional[int] = None) -> bool:
        with self._lock:
            found = self._find(rid, owner)
            if found is not None:
                del self._items[rid]
                self._chars -= found[3]
            return found is not None

    def chain(self, rid: str, owner: Optional[int] = None) -> list:
        """The messages of rid and all its predecessors (all stored by owner), oldest first; 400 when one
        is not stored."""
        parts, seen, at = [], [], rid
        while at is not None:
            found = self._find(at, owner) if at not in seen else None
            if found is None:
                what = "was not found (never stored, deleted, or evicted)" if at == rid else \
                    f"continues {at!r}, which was not found (deleted or evicted)"
                raise APIError(400, f"previous response {rid!r} {what}", param="previous_response_id",
                               code="previous_response_not_found")
            seen.append(at)
            parts.append(found[1])
            at = found[2]
        with self._lock:        # oldest first, so the chain's newest response is the most recently used
            for rid_ in reversed(seen):
                if rid_ in self._items:
                    self._items.move_to_end(rid_)
        return [m for msgs in reversed(parts) for m in msgs]


# ---- request -> native ----

def _sampling(req: ResponsesRequest, prompt_len: int, context_len: int) -> dict:
    room = max(context_len - prompt_len, 0)
    sp = {"max_new_tokens": room if req.max_output_tokens is None else min(req.max_output_tokens, room),
          "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
          "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty,
          "repetition_penalty": req.repetition_penalty, "stop": req.stop, "seed": req.seed,
          "ignore_eos": req.ignore_eos}
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and fmt.type == "json_object":
        sp["json_schema"] = BUILTIN_JSON
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.schema_ is None:
            raise APIError(400, "text.format of type json_schema needs a schema", param="text.format.schema")
        sp["json_schema"] = json.dumps(fmt.schema_)
    return {k: v for k, v in sp.items() if v is not None}


def _input_param(exc: APIError) -> APIError:
    """A chat-path error that names `messages`/`prompt`, renamed to this route's `input`."""
    if exc.param and exc.param.split(".")[0] in ("messages", "prompt"):
        return APIError(exc.status, exc.message, exc.type, "input", exc.code)
    return exc


def _tool_echo(tools: list) -> list:
    return [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
             "strict": t.strict} for t in tools]


class _ResponseJob:
    """One /v1/responses request: its prompt, sampling, tools, and the response it builds."""

    def __init__(self, state, req: ResponsesRequest, generated: GeneratedCalls, store: ResponseStore,
                 parser_option, caller):
        self.state, self.req, self.store, self.caller = state, req, store, caller
        self._reasoning_option = getattr(state.args, "reasoning_parser", None)
        self.generated = generated.scoped(caller.key)   # this key's generated tool-call turns
        self.id = new_id("resp")
        self.created = int(time.time())
        self.model = req.model or state.served_model_name
        refuse_unsupported(req)
        if req.top_logprobs or "message.output_text.logprobs" in (req.include or []):
            raise APIError(400, "logprobs are not returned on /v1/responses; use /v1/chat/completions",
                           param="top_logprobs" if req.top_logprobs else "include")
        tm = state.tm
        history, names = [], {}
        if req.previous_response_id is not None:
            history = store.chain(req.previous_response_id, caller.key)
            names = {c.id: c.function.name for m in history for c in (m.tool_calls or [])}
        self.new_messages = input_messages(req.input, names)
        system = [ChatMessage(role="system", content=req.instructions)] if req.instructions else []
        messages = system + history + self.new_messages
        if not messages:
            raise APIError(400, "input is empty", param="input")
        fmt = choose_format(getattr(tm.tokenizer, "chat_template", None), parser_option)
        tools = parse_response_tools(req.tools)
        callable_tools, choice = parse_response_choice(req.tool_choice, tools, req.parallel_tool_calls)
        if req.max_tool_calls == 0:
            choice = type(choice)("none", None, choice.parallel)
        elif req.max_tool_calls == 1:
            choice = type(choice)(choice.mode, choice.name, False)
        elif req.max_tool_calls is not None:
            raise APIError(400, "max_tool_calls above 1 is not enforced here; use parallel_tool_calls",
                           param="max_tool_calls")
        self.tools, self.choice = tools, choice
        self._messages, self._fmt, self._callable = messages, fmt, callable_tools
        self.ids, self.sp, self.tools_parser, self.thinking = None, None, None, None
        self.builder = OutputBuilder()
        self.seq = 0

    async def prepare(self) -> None:
        """Render and tokenize the prompt (on the tokenizer thread, characters bounded first, as the chat
        route does), then the sampling params and the tool grammar."""
        tm, req, fmt, choice = self.state.tm, self.req, self._fmt, self.choice
        body = SimpleNamespace(messages=self._messages, tools=req.tools, functions=None)
        try:
            kwargs = reasoning_request.template_kwargs(req.chat_template_kwargs, (req.reasoning or {}).get("effort"))
            ids = await chat_ids(tm, body, fmt, self.tools, choice, self.generated, kwargs)
            check_tools_fit(self.tools, choice, len(ids), tm.context_len)
            tm.validate_prompt(ids)
        except APIError as exc:
            raise _input_param(exc) from None
        except ValueError as exc:
            raise APIError(400, str(exc), param="input") from None
        self.ids = ids
        self.sp = _sampling(req, len(ids), tm.sequence_limit)
        try:
            calls_possible = add_tool_grammar(self.sp, fmt, self._callable, choice)
        except APIError as exc:
            raise APIError(exc.status, exc.message.replace("response_format", "text.format"), param="text.format") \
                from None
        self.tools_parser = ChoiceTools(fmt) if calls_possible else None
        plan = reasoning_request.plan(
            tm.tokenizer, choose_reasoning(getattr(tm.tokenizer, "chat_template", None), self._reasoning_option),
            ids, self.sp, reasoning_request.budget(req.max_thinking_tokens, (req.reasoning or {}).get("effort"),
                                                   "reasoning.effort"), asked=req.max_thinking_tokens is not None)
        self.thinking = ChoiceReasoning(plan) if plan is not None else None

    def native(self) -> GenerateReqInput:
        return GenerateReqInput(input_ids=self.ids, sampling_params=self.sp, stream=self.req.stream, rid=self.id,
                                cache_salt=self.req.cache_salt)

    # -- the output --
    def feed(self, delta: str, final: bool = False) -> list:
        events = []
        if self.thinking is not None:
            parsed = self.thinking.feed(delta)
            if final:
                parsed += self.thinking.finish()
            events += self.builder.reasoning(parsed.reasoning)
            for name, args in parsed.calls:          # harmony's tool-call channel
                events += self.builder.call(shape.channel_calls([(name, args)])[0]["id"], name)
                events += self.builder.arguments(args)
            delta = parsed.content
        if self.tools_parser is None:
            return events + self.builder.text(delta)
        return events + [ev for body in self.tools_parser.feed(delta) for ev in self.builder.chat_body(body)]

    def finish(self, out: dict) -> list:
        """Events that close the output; `out` is the final native result."""
        reason = shape.finish_reason(out)
        events = self.feed("", final=True) if self.thinking is not None else []
        if self.tools_parser is not None:
            events += [ev for body in self.tools_parser.finish() for ev in self.builder.chat_body(body)]
            if self.tools_parser.calls and out.get("output_ids"):
                self.generated.save(self.tools_parser.saved_calls(), self.tools_parser.content, out["output_ids"],
                                    self.thinking.reasoning if self.thinking is not None else "")
        return events + self.builder.finish("incomplete" if reason == "length" else "completed")

    def response(self, status: str, out: Optional[dict] = None, error: Optional[dict] = None) -> dict:
        req = self.req
        usage = None
        if out is not None:
            meta = out["meta_info"]
            prompt, completion, cached = meta["prompt_tokens"], meta["completion_tokens"], meta.get("cached_tokens", 0)
            written = prompt - cached if getattr(self.state, "prefix_cache", True) else 0
            usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached,
                                                                      "cache_write_tokens": written},
                     "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": (
                         reasoning_request.thinking_tokens(out.get("output_ids") or [], self.sp.get("think_end_ids")))},
                     "total_tokens": prompt + completion}
        choice = req.tool_choice if req.tool_choice is not None else ("auto" if self.tools else "none")
        text_format = req.text.format.model_dump(by_alias=True, exclude_none=True) \
            if req.text is not None and req.text.format is not None else {"type": "text"}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": req.max_tool_calls, "model": self.model,
            "output": [dict(i) for i in self.builder.items] if status != "in_progress" else [],
            "parallel_tool_calls": self.choice.parallel, "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": (req.reasoning or {}).get("effort"), "summary": None},
            "store": req.store is not False,
            "temperature": req.temperature, "text": {"format": text_format}, "tool_choice": choice,
            "tools": _tool_echo(self.tools), "top_p": req.top_p, "truncation": req.truncation or "disabled",
            "usage": usage, "user": req.user, "metadata": req.metadata or {}, "background": False,
            "service_tier": "default", "top_logprobs": 0,
        }

    def completed(self, out: dict) -> dict:
        """The final response object; stored when the request asked for it."""
        status = "incomplete" if out["meta_info"]["finish_reason"].get("type") == "length" else "completed"
        resp = self.response(status, out)
        if self.req.store is not False:
            self.store.put(resp, self.new_messages + output_messages(resp["output"]), self.req.previous_response_id,
                           self.caller.key)
        return resp

    def sse(self, event: dict) -> bytes:
        event = {**event, "sequence_number": self.seq}
        self.seq += 1
        return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"

    async def events(self, first, gen):
        sent, out = "", None
        try:
            yield self.sse({"type": "response.created", "response": self.response("in_progress")})
            yield self.sse({"type": "response.in_progress", "response": self.response("in_progress")})
            latest = first
            while True:
                out = latest
                text = out["text"]
                delta = text[len(sent):] if text.startswith(sent) else text
                sent = text
                for ev in self.feed(delta) if delta else []:
                    yield self.sse(ev)
                if out["meta_info"].get("finish_reason") is not None:
                    break
                try:
                    latest = await gen.__anext__()
                except StopAsyncIteration:
                    break
            for ev in self.finish(out):
                yield self.sse(ev)
            resp = self.completed(out)
            kind = "response.completed" if resp["status"] == "completed" else "response.incomplete"
            yield self.sse({"type": kind, "response": resp})
        except Exception as exc:
            if not isinstance(exc, (APIError, ValueError)):
                logger.exception("responses stream failed")
            message = exc.message if isinstance(exc, APIError) else str(exc)
            error = {"code": "server_error", "message": message}
            yield self.sse({"type": "response.failed", "response": self.response("failed", error=error)})
        finally:
            await gen.aclose()


async def _run(request: Request, job: _ResponseJob):
    await or_disconnect(request, job.prepare())
    gen = run_generate(job.state.tm, job.native(), job.caller)
    try:
        if job.req.stream:
            first = await or_disconnect(request, first_of(gen))
            if (first["meta_info"].get("finish_reason") or {}).get("type") == "abort":
                await gen.aclose()
                shape.finish_reason(first)       # refused before any token: raises its 4xx
            return SSEResponse(job.events(first, gen))
        out = await or_disconnect(request, last_of(gen))
        job.feed(out["text"])
        job.finish(out)
        return json_response(job.completed(out))
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    except APIError as exc:
        if job.tools_parser is not None and exc.message.startswith("invalid structural_tag"):
            detail = exc.message.split(":", 1)[-1].strip()
            raise APIError(400, f"a tool's parameters schema does not compile: {detail}", param="tools") from None
        raise


# ---- routes ----

def add_responses_routes(app: FastAPI, state, generated: GeneratedCalls, parser_option=None) -> ResponseStore:
    store = ResponseStore()

    @app.post("/v1/responses")
    async def create_response(request: Request):
        body = await read_json(request)
        items = body.get("input")
        if isinstance(items, list) and len(items) >= state.tm.context_len:
            raise APIError(400, f"{len(items)} input items cannot fit this model's context of "
                                f"{state.tm.context_len} tokens", param="input")
        req = parse(ResponsesRequest, body)
        check_model(state, req.model)
        state.check_alive()
        job = _ResponseJob(state, req, generated, store, parser_option, caller_of(request, state.args))
        return await _run(request, job)

    def _stored(request: Request, response_id: str):
        found = store.get(response_id, caller_of(request, state.args).key)
        if found is None:
            raise APIError(404, f"no stored response with id {response_id!r}", param="response_id",
                           code="not_found")
        return found

    @app.get("/v1/responses/{response_id}")
    async def get_response(request: Request, response_id: str):
        return json_response(_stored(request, response_id)[0])

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request, response_id: str):
        _stored(request, response_id)
        store.delete(response_id, caller_of(request, state.args).key)
        return json_response({"id": response_id, "object": "response.deleted", "deleted": True})

    return store
