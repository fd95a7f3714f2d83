"""OpenAI request bodies as pydantic models; parse() turns a ValidationError into a 400 naming the field.

Unknown fields are refused (a typo is an error, not a silent default), except a few OpenAI fields that
have no effect here (user, metadata, store, service_tier; on messages refusal, annotations, audio).  SGLang's extras
(top_k, min_p, regex, json_schema, ...) are accepted at the top level, where the SDK's extra_body puts them, and so
are the ones SGLang's gateway (sglang-router) writes into every body it forwards at their defaults:
return_hidden_states and continue_final_message (400 unless false: not implemented), separate_reasoning and
stream_reasoning (as SGLang's: reasoning_content apart from content, streamed as it comes).  Reasoning models
take chat_template_kwargs (enable_thinking, ...), max_thinking_tokens and reasoning_effort (a budget, see
reasoning/request.py); an assistant message sent back may carry its reasoning_content.
"""

import os
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from radixlm.runtime.api.http import APIError
from radixlm.runtime.sampling_params import MAX_N

MAX_TOP_LOGPROBS = 20


def _refused_when_true(field: str, message: str):
    """A validator for a flag whose feature radixlm lacks: true is a 400 with `message`."""
    def check(cls, v):
        if v:
            raise ValueError(message)
        return v
    return field_validator(field)(classmethod(check))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = "response"
    description: Optional[str] = None
    schema_: Optional[Dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None


class SamplingFields(_Strict):
    model: Optional[str] = None
    n: int = Field(1, ge=1, le=MAX_N)
    max_tokens: Optional[int] = Field(None, ge=0)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    logit_bias: Optional[Dict[str, float]] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    response_format: Optional[ResponseFormat] = None
    # SGLang extras (extra_body puts them at the top level)
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    ignore_eos: Optional[bool] = None
    min_tokens: Optional[int] = Field(None, ge=0)
    stop_token_ids: Optional[List[int]] = None
    stop_regex: Optional[Union[str, List[str]]] = None
    skip_special_tokens: Optional[bool] = None
    no_stop_trim: Optional[bool] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    json_schema: Optional[Union[str, Dict[str, Any]]] = None
    rid: Optional[str] = None
    cache_salt: Optional[str] = Field(None, min_length=1)   # vLLM's: only requests with the same salt share cached KV
    return_hidden_states: Optional[Union[bool, Literal["last"]]] = None   # false only (SGLang's gateway sends it)
    # accepted and ignored
    user: Optional[str] = None
    metadata: Optional[Dict[str, Any]] = None
    store: Optional[bool] = None
    service_tier: Optional[str] = None

    _no_hidden_states = _refused_when_true("return_hidden_states",
                                           "hidden states are not returned here; send false or leave it out")


class CompletionRequest(SamplingFields):
    prompt: Union[str, List[str], List[int], List[List[int]]]
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    suffix: Optional[str] = None
    best_of: Optional[int] = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Optional[str] = None


class FunctionCall(_Strict):
    name: str
    arguments: Union[str, Dict[str, Any]] = "{}"


class ToolCall(_Strict):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: FunctionCall
    index: Optional[int] = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Optional[Union[str, List[ContentPart]]] = None
    name: Optional[str] = None
    tool_call_id: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    function_call: Optional[FunctionCall] = None
    reasoning_content: Optional[str] = None      # an assistant turn's thinking, as this server returned it
    # accepted and ignored (an assistant message sent back as the SDK returned it)
    refusal: Optional[str] = None
    annotations: Optional[List[Any]] = None
    audio: Optional[Any] = None


class ChatRequest(SamplingFields):
    messages: List[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: Optional[List[Any]] = None
    tool_choice: Optional[Any] = None
    parallel_tool_calls: Optional[bool] = None
    functions: Optional[List[Any]] = None
    function_call: Optional[Any] = None
    # SGLang's chat extras, which its gateway sends at their defaults
    continue_final_message: Optional[bool] = None    # false only
    separate_reasoning: Optional[bool] = None        # default true: reasoning_content apart from content
    stream_reasoning: Optional[bool] = None          # default true: false sends the reasoning in one delta
    chat_template_kwargs: Optional[Dict[str, Any]] = None   # extra template arguments (enable_thinking: false)
    max_thinking_tokens: Optional[int] = Field(None, ge=0)  # thinking budget: the end of thinking is forced
    reasoning_effort: Optional[str] = None           # minimal, low, medium, high: a thinking budget

    _no_continue_final_message = _refused_when_true(
        "continue_final_message", "continuing the final assistant message is not implemented; send false or leave it out")


_UNION_LABELS = {"str", "int", "float", "bool", "list", "dict", "none"}


def validation_error(exc: ValidationError) -> APIError:
    parts, param = [], None
    for err in exc.errors()[:3]:
        loc = [str(x) for x in err["loc"] if not (isinstance(x, str) and ("[" in x or x in _UNION_LABELS))]
        path = ".".join(loc) or "body"
        param = param or path
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{path}'")
        elif err["type"] == "missing":
            parts.append(f"missing required field '{path}'")
        else:
            parts.append(f"invalid '{path}': {err['msg']}")
    return APIError(400, "; ".join(dict.fromkeys(parts)), param=param)


def parse(model, body: dict):
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _model_names(state) -> set:
    names = {state.served_model_name, state.args.model, str(state.model_path), "default"}
    return names | {os.path.basename(str(n).rstrip("/")) for n in names if n}


def check_model(state, model: Optional[str]) -> None:
    if model is not None and model not in _model_names(state):
        raise APIError(404, f"the model '{model}' does not exist; this server serves '{state.served_model_name}'",
                       param="model", code="model_not_found")
