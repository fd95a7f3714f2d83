"""Reasoning models over the OpenAI chat API, on launched servers: a tiny random Qwen3 with Qwen3's real
chat template and a tiny random Qwen2 with DeepSeek-R1-Distill's (reasoning parser chosen from them).

A random model never ends its thinking by itself, so the requests give a thinking budget
(max_thinking_tokens), which forces `</think>`.  Oracles: the same request with separate_reasoning
false returns the raw text, whose whole-text parse must equal reasoning_content / content; streamed
deltas join to the whole message; jsonschema validates every JSON answer and forced tool call made
after the thinking; the budget is the thinking's length in tokens; cached_tokens across turns."""

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from tool_oracles import SCHEMAS, TOOLS

from radixlm.runtime.openai.reasoning.think_tags import parse_whole

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 9},
                                           "word": {"enum": ["yes", "no"]}},
          "required": ["answer", "word"], "additionalProperties": False}
BUDGET = 12
Q = [{"role": "user", "content": "Think, then answer."}]


@pytest.fixture(scope="module", params=["qwen3", "deepseek-r1"])
def served(request, thinking_server):
    srv = thinking_server(request.param)
    return srv, openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key), request.param


def _chat(client, **kw):
    kw.setdefault("messages", Q)
    kw.setdefault("max_tokens", 40)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model="default", **kw)


def test_reasoning_content_equals_the_raw_texts_parse(served):
    srv, client, _ = served
    extra = {"max_thinking_tokens": BUDGET}
    whole = _chat(client, extra_body=extra)
    split = whole.choices[0]
    raw = _chat(client, extra_body={**extra, "separate_reasoning": False}).choices[0]
    assert raw.message.model_extra.get("reasoning_content") is None
    want = parse_whole(raw.message.content)
    assert "</think>" in raw.message.content
    assert split.message.model_extra["reasoning_content"] == (want.reasoning or None)
    assert split.message.content == want.content and split.finish_reason == "length"
    # the thinking's tokens: the budget, then the forced end marker
    assert whole.usage.completion_tokens_details.reasoning_tokens == BUDGET + 1 < whole.usage.completion_tokens


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_stream_joins_to_the_whole_message(served, stream_reasoning):
    srv, client, _ = served
    extra = {"max_thinking_tokens": BUDGET, "stream_reasoning": stream_reasoning}
    whole = _chat(client, extra_body=extra).choices[0].message
    reasoning, content, reasoning_chunks = "", "", 0
    for chunk in _chat(client, extra_body=extra, stream=True):
        for c in chunk.choices:
            piece = (c.delta.model_extra or {}).get("reasoning_content")
            if piece:
                reasoning, reasoning_chunks = reasoning + piece, reasoning_chunks + 1
            content += c.delta.content or ""
    assert reasoning == (whole.model_extra["reasoning_content"] or "") and content == whole.content
    if not stream_reasoning:
        assert reasoning_chunks == (1 if reasoning else 0)


def test_json_schema_answer_after_thinking(served):
    srv, client, _ = served
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}

    def one(seed):
        return _chat(client, response_format=fmt, temperature=1.0, seed=seed, max_tokens=80,
                     extra_body={"max_thinking_tokens": BUDGET, "separate_reasoning": seed % 2 == 0}).choices[0]

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(one, range(50)))
    for seed, c in enumerate(outs):
        assert c.finish_reason == "stop", (seed, c)
        text = c.message.content if seed % 2 == 0 else parse_whole(c.message.content).content
        jsonschema.validate(json.loads(text), SCHEMA)
        if seed % 2:     # the raw text: free thinking, its end, then the answer
            assert c.message.content.count("</think>") == 1 and not c.message.content.startswith("{")


def test_forced_tool_call_after_thinking(served):
    srv, client, kind = served
    if kind == "deepseek-r1":
        pytest.skip("R1's template has no tool format the parsers know (its own tool tokens)")

    def one(seed):
        name = ["get_weather", "add", "set_flags"][seed % 3]
        return name, _chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": name}},
                           temperature=1.0, seed=seed, max_tokens=120,
                           extra_body={"max_thinking_tokens": BUDGET}).choices[0]

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(one, range(50)))
    for name, c in outs:
        assert c.finish_reason == "tool_calls", c
        [call] = c.message.tool_calls
        assert call.function.name == name
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[name])
    assert sum(bool(c.message.model_extra["reasoning_content"]) for _, c in outs) > 25   # they thought first


def test_enable_thinking_false_constrains_from_the_first_token(served):
    srv, client, kind = served
    if kind == "deepseek-r1":
        pytest.skip("R1's template always opens the thinking")
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    c = _chat(client, response_format=fmt, max_tokens=60,
              extra_body={"chat_template_kwargs": {"enable_thinking": False}, "separate_reasoning": False}).choices[0]
    jsonschema.validate(json.loads(c.message.content), SCHEMA)      # no thinking before the JSON
    bad = srv.post("/v1/chat/completions", json={"messages": Q, "chat_template_kwargs": {"tokenize": True}})
    assert bad.status_code == 400 and "tokenize" in bad.text


def test_tool_loop_turn_two_hits_the_cache(served):
    srv, client, kind = served
    if kind == "deepseek-r1":
        pytest.skip("R1's template drops past thinking (a new prompt from that turn on)")
    kw = dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=120,
              extra_body={"max_thinking_tokens": BUDGET})
    first = _chat(client, **kw)
    msg = first.choices[0].message
    assert msg.model_extra["reasoning_content"]
    history = Q + [msg.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "5"}]
    second = _chat(client, **{**kw, "messages": history})
    assert second.usage.prompt_tokens_details.cached_tokens >= \
        first.usage.prompt_tokens + first.usage.completion_tokens - 1       # turn 1 token for token
    no_reasoning = [m for m in history]
    no_reasoning[1] = {k: v for k, v in history[1].items() if k != "reasoning_content"}
    third = _chat(client, **{**kw, "messages": no_reasoning})          # the template renders it: no thinking
    assert third.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens + \
        first.usage.completion_tokens - 1


def test_budget_leaves_no_request_in_its_thinking(served):
    srv, client, _ = served
    lengths = 0
    for seed in range(12):
        budget = [0, 5, 20][seed % 3]
        c = _chat(client, max_tokens=budget + 3, temperature=1.0, seed=seed,
                  extra_body={"max_thinking_tokens": budget, "separate_reasoning": False}).choices[0]
        if c.finish_reason == "length":       # never by length inside the thinking (a stop token may end it)
            lengths += 1
            assert "</think>" in c.message.content, (budget, c)
    assert lengths > 0 and srv.get("/get_server_info").json()["forced_thinking_tokens"] >= lengths


# ---- the Responses API ----

def test_responses_reasoning_items_whole_and_streamed(served):
    srv, client, _ = served
    fmt = {"type": "json_schema", "name": "a", "schema": SCHEMA}
    kw = dict(model="default", input="Think, then answer.", text={"format": fmt}, max_output_tokens=80,
              temperature=0, reasoning={"effort": "low"}, extra_body={"max_thinking_tokens": BUDGET})
    whole = client.responses.create(**kw)
    assert [i.type for i in whole.output] in (["reasoning", "message"], ["message"])
    jsonschema.validate(json.loads(whole.output_text), SCHEMA)
    assert whole.reasoning.effort == "low"
    assert 0 < whole.usage.output_tokens_details.reasoning_tokens <= BUDGET + 1 < whole.usage.output_tokens
    deltas, done = "", None
    with client.responses.stream(**kw) as stream:
        for ev in stream:
            if ev.type == "response.reasoning_text.delta":
                deltas += ev.delta
            elif ev.type == "response.reasoning_text.done":
                done = ev.text
        final = stream.get_final_response()
    if whole.output[0].type == "reasoning":
        text = whole.output[0].content[0].text
        assert deltas == done == text == final.output[0].content[0].text
    assert final.output_text == whole.output_text
    bad = srv.post("/v1/responses", json={"input": "x", "reasoning": {"effort": "extreme"}})
    assert bad.status_code == 400 and "reasoning.effort" in bad.text


def test_responses_tool_loop_sends_reasoning_back_and_hits_the_cache(served):
    srv, client, kind = served
    if kind == "deepseek-r1":
        pytest.skip("R1's template drops past thinking")
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"].get("parameters")}
             for t in TOOLS[:2]]
    kw = dict(model="default", tools=tools, tool_choice={"type": "function", "name": "add"}, max_output_tokens=120,
              temperature=0, extra_body={"max_thinking_tokens": BUDGET})
    first = client.responses.create(input="Add 2 and 3.", **kw)
    call = next(i for i in first.output if i.type == "function_call")
    jsonschema.validate(json.loads(call.arguments), SCHEMAS["add"])
    items = [{"role": "user", "content": "Add 2 and 3."}] + [i.model_dump(exclude_none=True) for i in first.output] \
        + [{"type": "function_call_output", "call_id": call.call_id, "output": "5"}]
    second = client.responses.create(input=items, **kw)
    assert second.usage.input_tokens_details.cached_tokens >= \
        first.usage.input_tokens + first.usage.output_tokens - 1
