"""OpenAI tool calling through the unchanged `openai` SDK against launched servers: a tiny Qwen2 with a
hermes template, a tiny Llama with a Llama-3.1-style template, and the default SmolLM2 (generic JSON).
Oracles: `jsonschema` validates every call's arguments; the tool_choice invariants; streamed ==
non-streamed; `cached_tokens` covers the previous turn when its calls come back in the history."""

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pydantic
import pytest
from tool_models import TOOL_SERVERS
from tool_oracles import TOOLS, check_calls, check_choice, varied_requests

MAX_TOKENS = 256
FORCED, FREE = 50, 10          # requests with tool_choice required / named / single, and with auto / none


@pytest.fixture(scope="module", params=list(TOOL_SERVERS))
def served(request, tool_server):
    srv = tool_server(request.param)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key, max_retries=0, timeout=300)
    return request.param, srv, client, client.models.list().data[0].id


def create(client, model, **kw):
    return client.chat.completions.create(model=model, max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)


def test_invariants_over_varied_tools_and_seeds(served):
    fmt, _, client, model = served
    requests = (varied_requests(FORCED, ["required", "named", "single"], seed=len(fmt))
                + varied_requests(FREE, ["auto", "none"], seed=len(fmt) + 1))
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda r: create(client, model, **r[0]), requests))
    for (kw, mode), resp in zip(requests, responses):
        check_choice(resp.choices[0], kw, mode)
    forced = [r for (kw, mode), r in zip(requests, responses) if mode in ("required", "named", "single")]
    assert len(forced) == FORCED
    assert sum(r.choices[0].finish_reason == "tool_calls" for r in forced) >= len(forced) - 3


def test_auto_with_strict_tools_never_gives_an_invalid_call(served):
    fmt, _, client, model = served
    strict = [{**t, "function": {**t["function"], "strict": True}} for t in TOOLS]
    for seed in range(3):
        resp = create(client, model, messages=[{"role": "user", "content": "Flags?"}], tools=strict, seed=seed,
                      temperature=1.0)
        check_choice(resp.choices[0], {"tools": strict}, "auto")


def accumulate_stream(chunks) -> dict:
    """{index: (content, [(id, name, arguments)], finish_reason)} from raw chunks, checking the delta
    contract: a call's first delta has index, id, type, name and arguments ""; later ones only
    non-empty argument fragments with an index."""
    out = {}
    for chunk in chunks:
        for ch in chunk.choices:
            content, calls, finish = out.get(ch.index, ("", [], None))
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                assert tc.index is not None
                if tc.index == len(calls):
                    assert tc.id.startswith("call_") and tc.type == "function" and tc.function.name
                    assert tc.function.arguments == ""
                    calls.append([tc.id, tc.function.name, ""])
                else:
                    assert tc.index == len(calls) - 1 and tc.id is None and tc.function.name is None
                    assert tc.function.arguments
                    calls[tc.index][2] += tc.function.arguments
            out[ch.index] = (content, calls, ch.finish_reason or finish)
    return out


def summary(choice) -> tuple:
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return (choice.message.content or "", calls, choice.finish_reason)


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_streamed_equals_non_streamed(served, mode):
    fmt, _, client, model = served
    kw = dict(messages=[{"role": "user", "content": "Weather in Paris, then add 2 and 3."}], tools=TOOLS,
              tool_choice=mode, seed=11, temperature=1.0, n=2)
    whole = create(client, model, **kw)
    streamed = accumulate_stream(create(client, model, stream=True, **kw))
    assert len(whole.choices) == 2
    for choice in whole.choices:
        content, calls, finish = streamed[choice.index]
        assert (content, [(n, a) for _, n, a in calls], finish) == summary(choice)
    if mode == "required":
        assert all(c.finish_reason == "tool_calls" or c.finish_reason == "length" for c in whole.choices)
        assert any(c.message.tool_calls for c in whole.choices)


def test_sdk_stream_helper_and_parse_with_pydantic_tool(served):
    fmt, _, client, model = served

    class GetWeather(pydantic.BaseModel):
        city: str = pydantic.Field(pattern="^[a-z]{1,8}$")
        unit: str = pydantic.Field(pattern="^(c|f)$")

    tool = openai.pydantic_function_tool(GetWeather)
    kw = dict(model=model, messages=[{"role": "user", "content": "Weather?"}], tools=[tool], seed=3,
              tool_choice={"type": "function", "function": {"name": "GetWeather"}}, max_tokens=MAX_TOKENS)
    parsed = client.chat.completions.parse(**kw)
    call = parsed.choices[0].message.tool_calls[0]
    assert isinstance(call.function.parsed_arguments, GetWeather)
    with client.chat.completions.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [e.name for e in done] == ["GetWeather"] and isinstance(done[0].parsed_arguments, GetWeather)
    assert final.choices[0].message.tool_calls[0].function.arguments == call.function.arguments
    assert final.choices[0].finish_reason == "tool_calls"


def test_history_sent_back_hits_the_cache(served):
    fmt, _, client, model = served
    messages = [{"role": "system", "content": "You call tools."}, {"role": "user", "content": "Add 2 and 3."}]
    previous = 0
    for turn in range(3):
        resp = create(client, model, messages=messages, tools=TOOLS, tool_choice="required",
                      parallel_tool_calls=False, seed=turn)
        if turn:
            cached = resp.usage.prompt_tokens_details.cached_tokens
            assert cached >= previous - 1, (turn, cached, previous)    # all but the last generated token
        msg = resp.choices[0].message
        assert resp.choices[0].finish_reason == "tool_calls" and len(msg.tool_calls) == 1
        previous = resp.usage.prompt_tokens + resp.usage.completion_tokens
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": json.dumps({"result": 5})}]
    edited = json.loads(json.dumps(messages[-2]))
    edited["tool_calls"][0]["id"] = "call_not_generated_here"
    other = create(client, model, messages=messages[:-2] + [edited, messages[-1]], tools=TOOLS, max_tokens=1)
    assert other.usage.prompt_tokens_details.cached_tokens < previous - 1   # the template's rendering differs


def test_legacy_functions(served):
    fmt, _, client, model = served
    functions = [t["function"] for t in TOOLS[:2]]
    resp = create(client, model, messages=[{"role": "user", "content": "Add."}], functions=functions,
                  function_call={"name": "add"}, seed=5)
    choice = resp.choices[0]
    assert choice.finish_reason == "function_call" and choice.message.tool_calls is None
    assert choice.message.function_call.name == "add"
    check_calls([type("Call", (), {"type": "function", "id": "call_x", "function": choice.message.function_call})],
                TOOLS)


def bad(client, model, **kw) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        create(client, model, max_tokens=4, **kw)
    return info.value


def test_bad_tool_requests_get_a_400_naming_the_field(served):
    fmt, srv, client, model = served
    user = [{"role": "user", "content": "Hi"}]
    history = user + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    err = bad(client, model, messages=history, tools=TOOLS)
    assert err.body["param"] == "messages.1.tool_calls.0.function.arguments" and "not valid JSON" in err.message
    err = bad(client, model, messages=user, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err.body["param"] == "tool_choice.function.name" and "nope" in err.message
    broken = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "no-such-type"}}, "required": ["a"]}}}]
    err = bad(client, model, messages=user, tools=broken, tool_choice="required")
    assert err.body["param"] == "tools" and "does not compile" in err.message
    err = bad(client, model, messages=user, tools=broken, tool_choice="required", stream=True)
    assert err.body["param"] == "tools"
    huge = [{"type": "function", "function": {"name": f"tool_{i}", "description": "word " * 400}} for i in range(20)]
    err = bad(client, model, messages=user, tools=huge)
    assert err.body["param"] == "tools" and "context length" in err.message
    err = bad(client, model, messages=user, tool_choice="required")
    assert err.body["param"] == "tool_choice"
    assert create(client, model, messages=user, tools=TOOLS, tool_choice="required").choices[0].message.tool_calls
