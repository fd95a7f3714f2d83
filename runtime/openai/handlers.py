"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

Requests are validated with the pydantic models of openai_protocol.py (errors name the field); each
becomes one native batch request (every prompt repeated n times, choice index = prompt * n + sample)
run through run_generate, and the cumulative native results become OpenAI responses or stream chunks.  Shapes follow the
openai SDK's typed models (every field present, optional ones null).
"""

import json
import logging
import time
import uuid
from typing import Optional

from fastapi import FastAPI, Request

import radixlm.runtime.openai.response as shape
from radixlm.runtime.api.client_scope import Caller, caller_of
from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.api.http import (
    SSE_DONE,
    APIError,
    SSEResponse,
    first_of,
    json_response,
    last_of,
    or_disconnect,
    read_json,
    sse_event,
)
from radixlm.runtime.api.request_flow import run_generate
from radixlm.runtime.openai.prompts import chat_ids, check_chat_body, check_completion_body, completion_prompts
from radixlm.runtime.openai.protocol import ChatRequest, CompletionRequest, SamplingFields, check_model, parse
from radixlm.runtime.openai.reasoning import choose_reasoning
from radixlm.runtime.openai.reasoning import request as reasoning_request
from radixlm.runtime.openai.reasoning.shape import ChoiceReasoning
from radixlm.runtime.openai.tool_calls import choose_format
from radixlm.runtime.openai.tool_calls.history import GeneratedCalls, OwnedCalls
from radixlm.runtime.openai.tool_calls.request import add_tool_grammar, check_tools_fit, parse_choice, parse_tools
from radixlm.runtime.openai.tool_calls.shape import ChoiceTools

logger = logging.getLogger(__name__)
MAX_CHOICES = 1024          # prompts x n in one request


# ---- request -> native ----

def _grammar(req: SamplingFields) -> dict:
    out = {}
    if req.json_schema is not None:
        out["json_schema"] = req.json_schema if isinstance(req.json_schema, str) else json.dumps(req.json_schema)
    for name in ("regex", "ebnf"):
        if getattr(req, name) is not None:
            out[name] = getattr(req, name)
    fmt = req.response_format
    if fmt is not None and fmt.type != "text":
        if out:
            raise APIError(400, "give at most one of response_format, json_schema, regex and ebnf",
                           param="response_format")
        if fmt.type == "json_object":
            out["json_schema"] = shape.JSON_OBJECT_SCHEMA   # an object, as SGLang maps json_object
        else:
            if fmt.json_schema is None or fmt.json_schema.schema_ is None:
                raise APIError(400, "response_format of type json_schema needs json_schema.schema",
                               param="response_format.json_schema")
            out["json_schema"] = json.dumps(fmt.json_schema.schema_)
    return out


def _sampling_params(req: SamplingFields, max_tokens: Optional[int], prompt_len: int, context_len: int) -> dict:
    room = max(context_len - prompt_len, 0)
    sp = {
        "max_new_tokens": room if max_tokens is None else min(max_tokens, room),
        "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
        "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty, "stop": req.stop, "stop_token_ids": req.stop_token_ids,
        "stop_regex": req.stop_regex,
        "seed": req.seed, "ignore_eos": req.ignore_eos, "min_new_tokens": req.min_tokens,
        "skip_special_tokens": req.skip_special_tokens, "no_stop_trim": req.no_stop_trim,
        "logit_bias": req.logit_bias,
    }
    if sp["min_new_tokens"] is not None:
        sp["min_new_tokens"] = min(sp["min_new_tokens"], sp["max_new_tokens"])
    sp.update(_grammar(req))
    return {k: v for k, v in sp.items() if v is not None}


def _validate_prompt(tm, ids: list) -> None:
    try:
        tm.validate_prompt(ids)
    except ValueError as exc:
        raise APIError(400, str(exc), param="prompt") from None


class _Job:
    """One OpenAI request as a native batch: prompts x n choices."""

    def __init__(self, state, kind: str, model: str, prompts: list, n: int, sp: dict, stream: bool,
                 include_usage: bool, logprobs: Optional[int], echo: bool = False, caller: Caller = None,
                 cache_salt: Optional[str] = None):
        self.state, self.kind, self.n = state, kind, n
        self.caller, self.cache_salt = caller, cache_salt   # cache namespace: the key (isolated) and salt
        self.model = model or state.served_model_name
        self.prompts = prompts                 # [(text or None, ids)]
        self.sp, self.stream, self.include_usage = sp, stream, include_usage
        self.logprobs, self.echo = logprobs, echo
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.warm_cached: Optional[list] = None
        self.tool_format = None                # chat with tools: the format module, else None
        self.legacy_functions = False
        self.generated: Optional[OwnedCalls] = None
        self._choice_tools: dict = {}
        self.reasoning = None                  # a ReasoningPlan when the model has a reasoning format
        self._choice_reasoning: dict = {}

    def use_tools(self, fmt, legacy: bool, generated: OwnedCalls) -> None:
        self.tool_format, self.legacy_functions, self.generated = fmt, legacy, generated

    def choice_tools(self, i: int) -> ChoiceTools:
        if i not in self._choice_tools:
            self._choice_tools[i] = ChoiceTools(self.tool_format, self.legacy_functions)
        return self._choice_tools[i]

    def usage(self, outs: list) -> dict:
        """Usage; with thinking, completion_tokens_details.reasoning_tokens counts the thinking's tokens."""
        usage = shape.usage(outs, self.n, self.warm_cached)
        end = self.sp.get("think_end_ids")
        if end:
            usage["completion_tokens_details"] = {"reasoning_tokens": sum(
                reasoning_request.thinking_tokens(o.get("output_ids") or [], end) for o in outs)}
        return usage

    def choice_reasoning(self, i: int) -> ChoiceReasoning:
        if i not in self._choice_reasoning:
            self._choice_reasoning[i] = ChoiceReasoning(self.reasoning)
        return self._choice_reasoning[i]

    def split_reasoning(self, i: int, delta: str, final: bool):
        """(reasoning text, content text, harmony calls) of a choice's new text (all content without a
        reasoning format)."""
        if self.reasoning is None:
            return "", delta, []
        cr = self.choice_reasoning(i)
        p = cr.feed(delta)
        if final:
            p += cr.finish()
        return p.reasoning, p.content, p.calls

    def remember(self, tools: ChoiceTools, out: dict, i: int) -> None:
        """Keep a finished choice's calls and token ids, so sending them back hits the cache."""
        if tools.calls and out.get("output_ids"):
            reasoning = self.choice_reasoning(i).reasoning if self.reasoning is not None else ""
            self.generated.save(tools.saved_calls(), tools.content, out["output_ids"], reasoning)

    def native(self) -> GenerateReqInput:
        ids = [p[1] for p in self.prompts for _ in range(self.n)]
        want_lp = self.logprobs is not None
        return GenerateReqInput(
            input_ids=ids, sampling_params=shape.choice_sampling_params(self.sp, len(self.prompts), self.n),
            stream=self.stream,
            rid=[f"{self.id}-{i}" for i in range(len(ids))], return_logprob=want_lp,
            logprob_start_len=0 if (want_lp and self.echo) else -1, top_logprobs_num=self.logprobs or 0,
            return_text_in_logprobs=True, cache_salt=self.cache_salt)

    async def warm(self) -> None:
        """n > 1: cache each prompt once so the n samples share it."""
        if self.n == 1 or self.sp.get("max_new_tokens", 1) == 0:
            return
        obj = GenerateReqInput(input_ids=[p[1] for p in self.prompts], sampling_params={"max_new_tokens": 0},
                               rid=[f"{self.id}-warm{i}" for i in range(len(self.prompts))],
                               cache_salt=self.cache_salt)
        outs = await last_of(run_generate(self.state.tm, obj, self.caller))
        self.warm_cached = [o["meta_info"].get("cached_tokens", 0) for o in outs]

    def prompt_text(self, i: int) -> str:
        """The text of choice i's prompt (decoded once when the prompt came as token ids)."""
        k = i // self.n
        text, ids = self.prompts[k]
        if text is None:
            text = self.state.tm.tokenizer.decode(ids)
            self.prompts[k] = (text, ids)
        return text

    def _envelope(self, obj: str, choices: list, usage=None) -> dict:
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices,
               "system_fingerprint": None, "service_tier": None}
        if obj == "chat.completion":
            out.update(usage=usage, metadata=None, moderation=None)
        elif obj == "chat.completion.chunk":
            out.update(moderation=None, obfuscation=None)
            if self.include_usage:
                out["usage"] = usage
        elif obj == "text_completion":
            out["usage"] = usage
            del out["service_tier"]
        return out

    # -- whole responses --
    def response(self, outs: list) -> dict:
        choices = []
        for i, out in enumerate(outs):
            reason = shape.finish_reason(out)
            meta = out["meta_info"]
            if self.kind == "chat":
                lp = shape.chat_logprobs(meta, tokenizer=self.state.tm.tokenizer) if self.logprobs is not None \
                    else None
                reasoning, text, calls = self.split_reasoning(i, out["text"], final=True)
                message = shape.message(text)
                if self.reasoning is not None:
                    message["reasoning_content"] = reasoning or None
                if self.tool_format is not None:
                    tools = self.choice_tools(i)
                    tools.feed(text)
                    tools.finish()
                    message.update(tools.message_fields())
                    reason = tools.finish_reason(reason)
                    self.remember(tools, out, i)
                elif calls:
                    message.update(content=text or None, tool_calls=shape.channel_calls(calls))
                    reason = "tool_calls" if reason == "stop" else reason
                choices.append({"index": i, "message": message, "logprobs": lp, "finish_reason": reason,
                                "matched_stop": shape.matched_stop(out)})
            else:
                prefix = self.prompt_text(i) if self.echo else ""
                lp = None
                if self.logprobs is not None:
                    lp = shape.completion_logprobs(meta, len(self.prompt_text(i)), self.echo)
                choices.append({"index": i, "text": prefix + out["text"], "logprobs": lp, "finish_reason": reason,
                                "matched_stop": shape.matched_stop(out)})
        usage = self.usage(outs)
        return self._envelope("chat.completion" if self.kind == "chat" else "text_completion", choices, usage)

    # -- streams --
    async def chunks(self, first, gen):
        total = len(self.prompts) * self.n
        sent_text, sent_lp, done = [""] * total, [0] * total, [False] * total
        started = [False] * total
        chunk_obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        outs = [None] * total
        try:
            latest = first
            while True:
                for i, out in enumerate(latest):
                    if out is None or done[i]:
                        continue
                    outs[i] = out
                    for choice in self._delta_choices(i, out, sent_text, sent_lp, started):
                        yield sse_event(self._envelope(chunk_obj, [choice]))
                    done[i] = out["meta_info"].get("finish_reason") is not None
                try:
                    latest = await gen.__anext__()
                except StopAsyncIteration:
                    break
            if self.include_usage and all(o is not None for o in outs):
                yield sse_event(self._envelope(chunk_obj, [], self.usage(outs)))
        except APIError as exc:
            yield sse_event({"error": {"message": exc.message, "type": exc.type, "param": exc.param,
                                       "code": exc.code}})
        except ValueError as exc:
            yield sse_event({"error": {"message": str(exc), "type": "invalid_request_error", "param": None,
                                       "code": None}})
        except Exception as exc:  # a bug: tell the client in-band, the status line is long gone
            logger.exception("stream failed")
            yield sse_event({"error": {"message": f"internal error: {exc}", "type": "server_error",
                                       "param": None, "code": None}})
        finally:
            await gen.aclose()
        yield SSE_DONE

    def _delta_choices(self, i, out, sent_text, sent_lp, started) -> list:
        reason = shape.finish_reason(out)
        meta = out["meta_info"]
        text = out["text"]
        delta = text[len(sent_text[i]):] if text.startswith(sent_text[i]) else text
        sent_text[i] = text
        n_lp = len(meta.get("output_token_logprobs") or [])
        new_lp = n_lp > sent_lp[i]
        choices = []
        if self.kind == "chat":
            if not started[i]:
                started[i] = True
                choices.append({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None})
            if self.reasoning is not None and (delta or reason):
                thought, delta, calls = self.split_reasoning(i, delta, final=reason is not None)
                choices += [{"index": i, "delta": body, "logprobs": None, "finish_reason": None}
                            for body in shape.reasoning_deltas(thought, calls)]
                if calls and reason == "stop":
                    reason = "tool_calls"
            if self.tool_format is not None and (delta or new_lp or reason):
                lp = shape.chat_logprobs(meta, sent_lp[i], self.state.tm.tokenizer) if self.logprobs is not None \
                    else None
                choices += self._tool_delta_choices(i, out, delta, reason, lp)
            elif delta or new_lp or reason:
                lp = shape.chat_logprobs(meta, sent_lp[i], self.state.tm.tokenizer) if self.logprobs is not None \
                    else None
                body = {"content": delta} if delta else {}
                choices.append({"index": i, "delta": body, "logprobs": lp, "finish_reason": reason,
                                **shape.matched_stop_field(out, reason)})
        else:
            echo_now = self.echo and not started[i]
            if echo_now:
                delta = self.prompt_text(i) + delta
            started[i] = True
            if delta or new_lp or reason:
                lp = None
                if self.logprobs is not None:
                    lp = shape.completion_logprobs(meta, len(self.prompt_text(i)), echo_now, sent_lp[i])
                choices.append({"index": i, "text": delta, "logprobs": lp, "finish_reason": reason,
                                **shape.matched_stop_field(out, reason)})
        sent_lp[i] = n_lp
        return choices

    def _tool_delta_choices(self, i, out, delta, reason, lp) -> list:
        """Stream choices of one update: content and tool-call deltas, then the finish (flushing
        whatever the parser held back, whichever update the output ended in)."""
        tools = self.choice_tools(i)
        bodies = tools.feed(delta) + (tools.finish() if reason else [])
        choices = [{"index": i, "delta": b, "logprobs": None, "finish_reason": None} for b in bodies]
        if reason:
            self.remember(tools, out, i)
            choices.append({"index": i, "delta": {}, "logprobs": lp, "finish_reason": tools.finish_reason(reason)})
        elif lp is not None and choices:
            choices[-1]["logprobs"] = lp
        elif lp is not None:
            choices.append({"index": i, "delta": {}, "logprobs": lp, "finish_reason": None})
        return choices


async def _run(request: Request, job: _Job):
    try:
        await or_disconnect(request, job.warm())
        gen = run_generate(job.state.tm, job.native(), job.caller)
        if job.stream:
            first = await or_disconnect(request, first_of(gen))
            if not isinstance(first, list):
                first = [first]
            for out in first:     # refused before any token (a grammar that does not compile): a 400
                if out is not None and (out["meta_info"].get("finish_reason") or {}).get("type") == "abort":
                    await gen.aclose()
                    shape.finish_reason(out)
            return SSEResponse(job.chunks(first, gen))
        outs = await or_disconnect(request, last_of(gen))
        return json_response(job.response(outs if isinstance(outs, list) else [outs]))
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    except APIError as exc:
        if job.tool_format is not None and exc.message.startswith("invalid structural_tag"):
            detail = exc.message.split(":", 1)[-1].strip()
            raise APIError(400, f"a tool's parameters schema does not compile: {detail}", param="tools") from None
        raise


# ---- routes ----

def add_openai_routes(app: FastAPI, state) -> None:
    parser_option = getattr(state.args, "tool_call_parser", None)
    choose_format(None, parser_option)       # an unknown --tool-call-parser fails at startup
    reasoning_option = getattr(state.args, "reasoning_parser", None)
    choose_reasoning(None, reasoning_option)  # and an unknown --reasoning-parser
    generated = GeneratedCalls()
    from radixlm.runtime.openai.responses_api import add_responses_routes
    add_responses_routes(app, state, generated, parser_option)     # /v1/responses, on the same store
    from radixlm.runtime.openai.tool_calls.sglang_parse import add_parse_function_call_route
    add_parse_function_call_route(app, state, parser_option)        # SGLang's native /parse_function_call

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await read_json(request)
        check_chat_body(state.tm, body)
        req = parse(ChatRequest, body)
        check_model(state, req.model)
        state.check_alive()
        tm = state.tm
        tool_format = choose_format(getattr(tm.tokenizer, "chat_template", None), parser_option)
        tools = parse_tools(req.tools, req.functions)
        choice = parse_choice(req.tool_choice, req.function_call, tools,
                              False if req.functions else req.parallel_tool_calls)
        caller = caller_of(request, state.args)
        turns = generated.scoped(caller.key)          # this key's generated tool-call turns
        template_kwargs = reasoning_request.template_kwargs(req.chat_template_kwargs, req.reasoning_effort)
        ids = await chat_ids(tm, req, tool_format, tools, choice, turns, template_kwargs)
        check_tools_fit(tools, choice, len(ids), tm.context_len)
        _validate_prompt(tm, ids)
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        sp = _sampling_params(req, max_tokens, len(ids), tm.sequence_limit)   # no max_tokens: what fits
        calls_possible = add_tool_grammar(sp, tool_format, tools, choice)
        plan = reasoning_request.plan(
            tm.tokenizer, choose_reasoning(getattr(tm.tokenizer, "chat_template", None), reasoning_option), ids, sp,
            reasoning_request.budget(req.max_thinking_tokens, req.reasoning_effort), req.separate_reasoning,
            req.stream_reasoning, asked=req.max_thinking_tokens is not None)
        if req.top_logprobs and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        job = _Job(state, "chat", req.model, [(None, ids)], req.n, sp, req.stream, include_usage, logprobs,
                   caller=caller, cache_salt=req.cache_salt)
        job.reasoning = plan
        if calls_possible:
            job.use_tools(tool_format, bool(req.functions), turns)
        return await _run(request, job)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await read_json(request)
        check_completion_body(state.tm, body, MAX_CHOICES)
        req = parse(CompletionRequest, body)
        check_model(state, req.model)
        state.check_alive()
        if req.suffix:
            raise APIError(400, "suffix is not supported", param="suffix")
        if req.best_of is not None and req.best_of != req.n:
            raise APIError(400, "best_of must equal n (or be left out)", param="best_of")
        prompts = await completion_prompts(state.tm, req)
        if len(prompts) * req.n > MAX_CHOICES:
            raise APIError(400, f"{len(prompts)} prompts x n={req.n} is more than {MAX_CHOICES} choices", param="n")
        for _, ids in prompts:
            _validate_prompt(state.tm, ids)
        longest = max(len(ids) for _, ids in prompts)
        sp = _sampling_params(req, 16 if req.max_tokens is None else req.max_tokens, longest, state.tm.context_len)
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        job = _Job(state, "completion", req.model, prompts, req.n, sp, req.stream, include_usage, req.logprobs,
                   req.echo, caller=caller_of(request, state.args), cache_salt=req.cache_salt)
        return await _run(request, job)

    def card() -> dict:
        # owned_by "sglang", as SGLang's card says: the gateway (smg) reads it to pick the engine's wire
        # protocol, and without it takes any server that answers /version for vLLM
        return {"id": state.served_model_name, "object": "model", "created": state.started, "owned_by": "sglang",
                "root": str(state.model_path), "max_model_len": state.tm.context_len}

    @app.get("/v1/models")
    async def list_models():
        return json_response({"object": "list", "data": [card()]})

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str):
        check_model(state, model_id)
        return json_response(card())
