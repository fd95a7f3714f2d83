"""/v1/responses through the unchanged `openai` SDK against launched servers (a tiny Qwen2 with a hermes
template, a tiny Llama with a Llama-3.1-style template, the default SmolLM2 with the generic format).
Oracles: `jsonschema` validates every function_call's arguments; the tool_choice invariants; the SSE
event protocol (sequence numbers, per-item order, deltas that add up to the final items); streamed ==
non-streamed; `cached_tokens` covers the previous turn in a previous_response_id chain and in a
history sent back as items."""

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from tool_models import TOOL_SERVERS
from tool_oracles import SCHEMAS, TOOLS, varied_requests

MAX_TOKENS = 256
MANY = {"hermes": 30, "llama3_json": 30, "generic": 6}      # SmolLM2 decodes ~30x slower than the tiny models
RTOOLS = [{"type": "function", **t["function"]} for t in TOOLS]     # the Responses API's flat tool shape


@pytest.fixture(scope="module", params=list(TOOL_SERVERS))
def served(request, tool_server):
    srv = tool_server(request.param)
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key, max_retries=0, timeout=300)
    return request.param, srv, client, client.models.list().data[0].id


def as_responses(kw: dict) -> dict:
    """A chat.completions request of tool_oracles.varied_requests as a responses.create one."""
    tools = [{"type": "function", **t["function"]} for t in kw["tools"]]
    out = {"input": kw["messages"][0]["content"], "tools": tools, "temperature": kw["temperature"],
           "extra_body": {"seed": kw["seed"]}, "max_output_tokens": MAX_TOKENS}
    choice = kw.get("tool_choice")
    out["tool_choice"] = {"type": "function", "name": choice["function"]["name"]} if isinstance(choice, dict) \
        else choice
    if "parallel_tool_calls" in kw:
        out["parallel_tool_calls"] = kw["parallel_tool_calls"]
    return out


def check_output(resp, tools: list, mode: str) -> list:
    """The invariants of one response under its tool_choice mode; returns [(name, arguments)]."""
    names = {t["name"] for t in tools}
    assert resp.status in ("completed", "incomplete") and resp.object == "response"
    calls = [o for o in resp.output if o.type == "function_call"]
    assert all(o.type in ("message", "function_call") for o in resp.output)
    if mode == "none":
        assert not calls
    out = []
    for k, call in enumerate(calls):
        assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.name in names
        if call.status == "incomplete":       # cut by max_output_tokens: only the last item
            assert resp.status == "incomplete" and call is resp.output[-1]
            continue
        args = json.loads(call.arguments)
        jsonschema.validate(args, SCHEMAS[call.name])
        out.append((call.name, args))
    if mode in ("named", "single", "required") and resp.status == "completed":
        assert calls and not [o for o in resp.output if o.type == "message"]
    if mode in ("named", "single"):
        assert resp.status == "completed" and len(calls) == 1, resp
    if mode == "named":
        assert calls[0].name == resp.tool_choice.name
    assert resp.usage.input_tokens > 0 and resp.usage.total_tokens == resp.usage.input_tokens + \
        resp.usage.output_tokens
    return out


def test_invariants_over_varied_tools_and_seeds(served):
    fmt, _, client, model = served
    requests = varied_requests(MANY[fmt], ["required", "named", "single", "auto", "none"], seed=7 + len(fmt))
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda r: client.responses.create(model=model, **as_responses(r[0])), requests))
    for (kw, mode), resp in zip(requests, responses):
        check_output(resp, as_responses(kw)["tools"], mode)
    forced = [r for (_, mode), r in zip(requests, responses) if mode in ("required", "named", "single")]
    assert sum(r.status == "completed" for r in forced) >= len(forced) - 2


def events_to_output(events) -> tuple:
    """(output items as dicts, final response) from raw stream events, checking the event protocol."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    assert events[0].response.id == final.id and events[0].response.status == "in_progress"
    items, open_index = {}, None
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert open_index is None and e.output_index == len(items)
            open_index = e.output_index
            item = e.item.to_dict()
            items[open_index] = {**item, "text": "", "arguments": item.get("arguments", "")}
            continue
        assert e.output_index == open_index
        current = items[open_index]
        if e.type != "response.output_item.done":
            assert e.item_id == current["id"]
        if e.type == "response.output_text.delta":
            assert e.delta and current["type"] == "message"
            current["text"] += e.delta
        elif e.type == "response.function_call_arguments.delta":
            assert e.delta and current["type"] == "function_call"
            current["arguments"] += e.delta
        elif e.type == "response.output_text.done":
            assert e.text == current["text"]
        elif e.type == "response.function_call_arguments.done":
            assert e.arguments == current["arguments"]
        elif e.type == "response.output_item.done":
            done = e.item.to_dict()
            if done["type"] == "message":
                assert done["content"][0]["text"] == current["text"]
            else:
                assert done["arguments"] == current["arguments"] and done["call_id"] == current["call_id"]
            items[open_index] = done
            open_index = None
        else:
            assert e.type in ("response.content_part.added", "response.content_part.done"), e.type
    assert open_index is None
    assert [i for _, i in sorted(items.items())] == [o.to_dict() for o in final.output]
    return [i for _, i in sorted(items.items())], final


def without_ids(items: list) -> list:
    return [{k: v for k, v in i.items() if k not in ("id", "call_id")} for i in items]


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_streamed_equals_non_streamed(served, mode):
    fmt, _, client, model = served
    kw = dict(model=model, input="Weather in Paris, then add 2 and 3.", tools=RTOOLS, tool_choice=mode,
              temperature=1.0, extra_body={"seed": 11}, max_output_tokens=MAX_TOKENS, instructions="Use tools.")
    whole = client.responses.create(**kw)
    items, final = events_to_output(list(client.responses.create(stream=True, **kw)))
    assert without_ids(items) == without_ids([o.to_dict() for o in whole.output])
    assert final.status == whole.status and final.usage.output_tokens == whole.usage.output_tokens
    check_output(final, RTOOLS, mode)


def test_sdk_stream_helper(served):
    fmt, _, client, model = served
    kw = dict(model=model, input="Add 2 and 3.", tools=RTOOLS, tool_choice={"type": "function", "name": "add"},
              max_output_tokens=MAX_TOKENS, extra_body={"seed": 3})
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == check_output(final, RTOOLS, "named")[0][1]
    assert final.output[0].type == "function_call" and final.output[0].name == "add"
    events = list(client.responses.create(model=model, input="Hi", instructions="Be brief.", max_output_tokens=8,
                                          stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].response.output_text == deltas and events[-1].response.usage.output_tokens <= 8


ALLOWED = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "add"}]}


def tool_loop(client, model, choices: list, chained: bool, store: bool = True) -> list:
    """One turn per tool_choice (a single forced call and its result, or a final answer for "none"),
    sent back by previous_response_id (chained) or as the whole item history; returns
    [(cached_tokens, previous prompt + output)] from turn 2.  The choice changes between turns, as the
    Agents SDK's reset_tool_choice does, and the prompt's prefix must not."""
    items = [{"role": "user", "content": "Add 2 and 3."}]
    previous, seen, pending = None, [], items
    for turn, choice in enumerate(choices):
        resp = client.responses.create(
            model=model, instructions="You call tools.", input=pending if chained else items, tools=RTOOLS,
            tool_choice=choice, parallel_tool_calls=False, max_output_tokens=MAX_TOKENS if choice != "none" else 4,
            store=store, extra_body={"seed": turn}, previous_response_id=previous.id if (chained and previous) else None)
        if previous is not None:
            seen.append((resp.usage.input_tokens_details.cached_tokens,
                         previous.usage.input_tokens + previous.usage.output_tokens))
        if choice == "none":
            assert not [o for o in resp.output if o.type == "function_call"]
            break
        [call] = resp.output
        assert call.type == "function_call" and resp.status == "completed"
        assert choice != ALLOWED or call.name == "add"
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        result = {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"result": 5})}
        items = items + [o.to_dict() for o in resp.output] + [result]
        pending, previous = [result], resp
    return seen


@pytest.mark.parametrize("chained", [True, False])
def test_tool_loop_hits_the_cache(served, chained):
    fmt, _, client, model = served
    turns = tool_loop(client, model, ["required", ALLOWED, {"type": "function", "name": "ping"}, "none"], chained)
    assert len(turns) == 3
    for cached, previous in turns:
        assert cached >= previous - 1, (cached, previous)        # all but the last generated token


def test_store_retrieve_delete(served):
    fmt, _, client, model = served
    resp = client.responses.create(model=model, input="Hi", max_output_tokens=4, metadata={"k": "v"})
    got = client.responses.retrieve(resp.id)
    assert got.id == resp.id and got.output[0].content[0].text == resp.output_text and got.metadata == {"k": "v"}
    client.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=model, input="again", previous_response_id=resp.id, max_output_tokens=2)
    assert info.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model=model, input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    assert tool_loop(client, model, ["required", "required"], chained=False, store=False)   # stateless


def bad(client, model, **kw) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=model, max_output_tokens=4, **kw)
    return info.value


def test_bad_requests_get_a_400_naming_the_field(served):
    fmt, _, client, model = served
    call = {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{not json"}
    err = bad(client, model, input=[{"role": "user", "content": "Hi"}, call], tools=RTOOLS)
    assert err.body["param"] == "input.1.arguments" and "not valid JSON" in err.message
    err = bad(client, model, input=[{"type": "function_call_output", "output": "5"}])
    assert err.body["param"] == "input.0.call_id"
    err = bad(client, model, input=[{"type": "web_search_call", "id": "x"}])
    assert err.body["param"] == "input.0.type"
    err = bad(client, model, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])
    assert err.body["param"] == "input.0.content.0"
    err = bad(client, model, input="Hi", tools=[{"type": "web_search"}])
    assert err.body["param"] == "tools.0" and "function tools" in err.message
    err = bad(client, model, input="Hi", tools=RTOOLS, tool_choice={"type": "function", "name": "nope"})
    assert err.body["param"] == "tool_choice.name" and "nope" in err.message
    err = bad(client, model, input="Hi", tool_choice="required")
    assert err.body["param"] == "tool_choice"
    err = bad(client, model, input="Hi", truncation="auto")
    assert err.body["param"] == "truncation"
    err = bad(client, model, input="Hi", extra_body={"no_such_field": 1})
    assert "no_such_field" in err.message
    broken = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "no-such-type"}}, "required": ["a"]}}]
    err = bad(client, model, input="Hi", tools=broken, tool_choice="required")
    assert err.body["param"] == "tools" and "does not compile" in err.message
    err = bad(client, model, input="Hi", tools=RTOOLS, text={"format": {"type": "json_object"}}, tool_choice="auto")
    assert err.body["param"] == "text.format"
    huge = "word " * 12000
    err = bad(client, model, input=huge)
    assert err.body["param"] == "input"
    ok = client.responses.create(model=model, input="Hi", tools=RTOOLS, tool_choice="required",
                                 max_output_tokens=MAX_TOKENS)
    assert any(o.type == "function_call" for o in ok.output)


def test_allowed_tools_max_tool_calls_and_text_format(served):
    fmt, _, client, model = served
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "set_flags"}]}
    resp = client.responses.create(model=model, input="Flags", tools=RTOOLS, tool_choice=allowed,
                                   parallel_tool_calls=True, max_tool_calls=1, max_output_tokens=MAX_TOKENS)
    assert [o.name for o in resp.output if o.type == "function_call"] == ["set_flags"]
    check_output(resp, RTOOLS, "single")
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    resp = client.responses.create(model=model, input="A number", max_output_tokens=64, text={"format": {
        "type": "json_schema", "name": "n", "schema": schema, "strict": True}})
    assert resp.status == "completed" and resp.text.format.type == "json_schema"
    jsonschema.validate(json.loads(resp.output_text), schema)
