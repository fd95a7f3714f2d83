"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/models.

Requests are validated with the pydantic models of openai_protocol.py (errors name the field); each
becomes one native batch request (every prompt repeated n times, choice index = prompt * n + sample)
run through run_generate, and the cumulative native results become OpenAI responses or stream chunks.  Shapes follow the
openai SDK's typed models (every field present, optional ones null).
"""

import json
import logging
import os
import time
import uuid
from typing import Optional

from fastapi import FastAPI, Request

from radixlm.constrained.backend import BUILTIN_JSON
from radixlm.runtime import openai_response as shape
from radixlm.runtime.generate_input import GenerateReqInput
from radixlm.runtime.http_common import (SSE_DONE, APIError, SSEResponse, first_of, json_response, last_of,
                                         or_disconnect, read_json, sse_event)
from radixlm.runtime.openai_protocol import ChatRequest, CompletionRequest, SamplingFields, parse
from radixlm.runtime.request_flow import run_generate

logger = logging.getLogger(__name__)
MAX_CHOICES = 1024          # prompts x n in one request


# ---- request -> native ----

def _model_names(state) -> set:
    names = {state.served_model_name, state.args.model, str(state.model_path), "default"}
    return names | {os.path.basename(str(n).rstrip("/")) for n in names if n}


def _check_model(state, model: Optional[str]) -> None:
    if model is not None and model not in _model_names(state):
        raise APIError(404, f"the model '{model}' does not exist; this server serves '{state.served_model_name}'",
                       param="model", code="model_not_found")


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
            out["json_schema"] = BUILTIN_JSON   # xgrammar's builtin JSON grammar
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
        "seed": req.seed, "ignore_eos": req.ignore_eos, "min_new_tokens": req.min_tokens,
        "skip_special_tokens": req.skip_special_tokens, "no_stop_trim": req.no_stop_trim,
        "logit_bias": req.logit_bias,
    }
    if sp["min_new_tokens"] is not None:
        sp["min_new_tokens"] = min(sp["min_new_tokens"], sp["max_new_tokens"])
    sp.update(_grammar(req))
    return {k: v for k, v in sp.items() if v is not None}


def _chat_prompt_ids(tokenizer, req: ChatRequest) -> list:
    if req.tools or req.functions:
        raise APIError(400, "tools and functions are not supported by this server", param="tools")
    messages = []
    for i, m in enumerate(req.messages):
        if isinstance(m.content, list):
            bad = [p.type for p in m.content if p.type != "text" or p.text is None]
            if bad:
                raise APIError(400, f"messages[{i}]: only text content parts are supported, got '{bad[0]}'",
                               param=f"messages.{i}.content")
            content = "".join(p.text for p in m.content)
        else:
            content = m.content or ""
        messages.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, "this model has no chat template; use /v1/completions", param="messages")
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:
        raise APIError(400, f"the chat template rejected the messages: {exc}", param="messages") from None
    return tokenizer.encode(text, add_special_tokens=False)


def _completion_prompts(tm, req: CompletionRequest) -> list:
    """[(text, ids)] for each prompt."""
    p = req.prompt
    if isinstance(p, str):
        items = [p]
    elif p and all(isinstance(x, int) for x in p):
        items = [list(p)]
    else:
        items = list(p)
    if not items:
        raise APIError(400, "prompt is an empty list", param="prompt")
    out = []
    for item in items:
        if isinstance(item, str):
            out.append((item, tm.tokenizer.encode(item)))
        else:
            out.append((None, list(item)))
    return out


def _validate_prompt(tm, ids: list) -> None:
    try:
        tm.validate_prompt(ids)
    except ValueError as exc:
        raise APIError(400, str(exc), param="prompt") from None


class _Job:
    """One OpenAI request as a native batch: prompts x n choices."""

    def __init__(self, state, kind: str, model: str, prompts: list, n: int, sp: dict, stream: bool,
                 include_usage: bool, logprobs: Optional[int], echo: bool = False):
        self.state, self.kind, self.n = state, kind, n
        self.model = model or state.served_model_name
        self.prompts = prompts                 # [(text or None, ids)]
        self.sp, self.stream, self.include_usage = sp, stream, include_usage
        self.logprobs, self.echo = logprobs, echo
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.warm_cached: Optional[list] = None

    def native(self) -> GenerateReqInput:
        ids = [p[1] for p in self.prompts for _ in range(self.n)]
        want_lp = self.logprobs is not None
        return GenerateReqInput(
            input_ids=ids, sampling_params=self.sp, stream=self.stream,
            rid=[f"{self.id}-{i}" for i in range(len(ids))], return_logprob=want_lp,
            logprob_start_len=0 if (want_lp and self.echo) else -1, top_logprobs_num=self.logprobs or 0,
            return_text_in_logprobs=True)

    async def warm(self) -> None:
        """n > 1: cache each prompt once so the n samples share it."""
        if self.n == 1 or self.sp.get("max_new_tokens", 1) == 0:
            return
        obj = GenerateReqInput(input_ids=[p[1] for p in self.prompts], sampling_params={"max_new_tokens": 0},
                               rid=[f"{self.id}-warm{i}" for i in range(len(self.prompts))])
        outs = await last_of(run_generate(self.state.tm, obj))
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
                lp = shape.chat_logprobs(meta) if self.logprobs is not None else None
                choices.append({"index": i, "message": shape.message(out["text"]), "logprobs": lp,
                                "finish_reason": reason})
            else:
                prefix = self.prompt_text(i) if self.echo else ""
                lp = None
                if self.logprobs is not None:
                    lp = shape.completion_logprobs(meta, len(self.prompt_text(i)), self.echo)
                choices.append({"index": i, "text": prefix + out["text"], "logprobs": lp, "finish_reason": reason})
        usage = shape.usage(outs, self.n, self.warm_cached)
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
                yield sse_event(self._envelope(chunk_obj, [], shape.usage(outs, self.n, self.warm_cached)))
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
            if delta or new_lp or reason:
                lp = shape.chat_logprobs(meta, sent_lp[i]) if self.logprobs is not None else None
                body = {"content": delta} if delta else {}
                choices.append({"index": i, "delta": body, "logprobs": lp, "finish_reason": reason})
        else:
            echo_now = self.echo and not started[i]
            if echo_now:
                delta = self.prompt_text(i) + delta
            started[i] = True
            if delta or new_lp or reason:
                lp = None
                if self.logprobs is not None:
                    lp = shape.completion_logprobs(meta, len(self.prompt_text(i)), echo_now, sent_lp[i])
                choices.append({"index": i, "text": delta, "logprobs": lp, "finish_reason": reason})
        sent_lp[i] = n_lp
        return choices


async def _run(request: Request, job: _Job):
    try:
        await or_disconnect(request, job.warm())
        gen = run_generate(job.state.tm, job.native())
        if job.stream:
            first = await or_disconnect(request, first_of(gen))
            if not isinstance(first, list):
                first = [first]
            return SSEResponse(job.chunks(first, gen))
        outs = await or_disconnect(request, last_of(gen))
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    return json_response(job.response(outs if isinstance(outs, list) else [outs]))


# ---- routes ----

def add_openai_routes(app: FastAPI, state) -> None:
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = parse(ChatRequest, await read_json(request))
        _check_model(state, req.model)
        state.check_alive()
        tm = state.tm
        ids = _chat_prompt_ids(tm.tokenizer, req)
        _validate_prompt(tm, ids)
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        sp = _sampling_params(req, max_tokens, len(ids), tm.context_len)
        if req.top_logprobs and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        job = _Job(state, "chat", req.model, [(None, ids)], req.n, sp, req.stream, include_usage, logprobs)
        return await _run(request, job)

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = parse(CompletionRequest, await read_json(request))
        _check_model(state, req.model)
        state.check_alive()
        if req.suffix:
            raise APIError(400, "suffix is not supported", param="suffix")
        if req.best_of is not None and req.best_of != req.n:
            raise APIError(400, "best_of must equal n (or be left out)", param="best_of")
        prompts = _completion_prompts(state.tm, req)
        if len(prompts) * req.n > MAX_CHOICES:
            raise APIError(400, f"{len(prompts)} prompts x n={req.n} is more than {MAX_CHOICES} choices", param="n")
        for _, ids in prompts:
            _validate_prompt(state.tm, ids)
        longest = max(len(ids) for _, ids in prompts)
        sp = _sampling_params(req, 16 if req.max_tokens is None else req.max_tokens, longest, state.tm.context_len)
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        job = _Job(state, "completion", req.model, prompts, req.n, sp, req.stream, include_usage, req.logprobs,
                   req.echo)
        return await _run(request, job)

    def card() -> dict:
        return {"id": state.served_model_name, "object": "model", "created": state.started, "owned_by": "radixlm",
                "root": str(state.model_path), "max_model_len": state.tm.context_len}

    @app.get("/v1/models")
    async def list_models():
        return json_response({"object": "list", "data": [card()]})

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str):
        _check_model(state, model_id)
        return json_response(card())
