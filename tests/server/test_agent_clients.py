"""Real agent clients, unchanged, against a launched server (a tiny random Qwen2 with a hermes template):
the OpenAI Agents SDK (a Runner loop with two function tools, through OpenAIChatCompletionsModel and
through the default Responses model, plain and streamed), LangChain (`bind_tools`, streamed
`tool_call_chunks`, `with_structured_output(method="function_calling")`) and LiteLLM through its
OpenAI-compatible provider.  Oracles: jsonschema validates every call's arguments against the schema
the client sent; the loop's second turn hits the radix cache for all of the first; the clients'
own protocol invariants (streamed chunks add up to the whole call).  No judged model answer."""

import asyncio
import json
import os
from typing import Annotated

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")     # no cost-map download at import
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

agents = pytest.importorskip("agents")
langchain_openai = pytest.importorskip("langchain_openai")
litellm = pytest.importorskip("litellm")
agents.set_tracing_disabled(True)        # never export traces (nothing but loopback is reachable, or allowed)
litellm.telemetry = False

MAX_TOKENS = 200


@pytest.fixture(scope="module")
def served(tool_server):
    srv = tool_server("hermes")
    return srv, openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key).models.list().data[0].id


Small = Annotated[int, Field(ge=0, le=99)]
City = Annotated[str, Field(pattern="^[a-z]{1,8}$")]


def add_impl(a: Small, b: Small) -> int:
    """Add two small integers."""
    return a + b


def weather_impl(city: City) -> str:
    """The weather in a city."""
    return "sunny in " + city


# ---- OpenAI Agents SDK ----

def agent_tools(seen: list) -> list:
    """The two tools as Agents SDK function tools that record and check each call against the schema
    the SDK sends (its strict JSON schema of the signature)."""
    made = []
    for impl in (add_impl, weather_impl):
        async def run(ctx, args: str, impl=impl, holder=made):
            tool = next(t for t in holder if t.name == impl.__name__)
            parsed = json.loads(args)
            jsonschema.validate(parsed, tool.params_json_schema)
            seen.append((impl.__name__, parsed))
            return str(impl(**parsed))

        base = agents.function_tool(impl)
        made.append(agents.FunctionTool(name=impl.__name__, description=base.description,
                                        params_json_schema=base.params_json_schema, on_invoke_tool=run,
                                        strict_json_schema=True))
    return made


def run_agent(model, streamed: bool, run_config=None) -> tuple:
    """A Runner loop: every turn must make one call (tool_choice required, no parallel calls); the loop
    ends after the second turn's tool result.  Returns (calls seen, result)."""
    seen, tool_turns = [], []

    def behavior(ctx, results):
        tool_turns.append(len(results))
        return agents.ToolsToFinalOutputResult(is_final_output=len(tool_turns) == 2,
                                               final_output=json.dumps(seen))

    settings = agents.ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=MAX_TOKENS,
                                    temperature=1.0, include_usage=True)
    agent = agents.Agent(name="calc", instructions="Use the tools.", tools=agent_tools(seen), model=model,
                         model_settings=settings, reset_tool_choice=False, tool_use_behavior=behavior)

    async def go():
        if not streamed:
            return await agents.Runner.run(agent, "Add 2 and 3, then the weather in paris.", max_turns=4,
                                           run_config=run_config)
        result = agents.Runner.run_streamed(agent, "Add 2 and 3, then the weather in paris.", max_turns=4,
                                            run_config=run_config)
        kinds = set()
        async for event in result.stream_events():
            kinds.add(event.type)
        assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
        return result

    return seen, asyncio.run(go())


def check_agent_run(seen, result) -> None:
    assert len(seen) == 2 and {name for name, _ in seen} <= {"add_impl", "weather_impl"}
    assert json.loads(result.final_output) == [[n, a] for n, a in seen]
    first, second = result.raw_responses
    assert second.usage.input_tokens_details.cached_tokens >= \
        first.usage.input_tokens + first.usage.output_tokens - 1      # turn 1 comes back token for token


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_agents_runner_loop_with_two_tools(served, api, streamed):
    srv, model_name = served
    client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key=srv.api_key, max_retries=0, timeout=120)
    if api == "chat_completions":
        seen, result = run_agent(agents.OpenAIChatCompletionsModel(model_name, client), streamed)
    else:      # the SDK's default model class, through its default provider
        config = agents.RunConfig(model_provider=agents.OpenAIProvider(openai_client=client), tracing_disabled=True)
        seen, result = run_agent(model_name, streamed, config)
        assert all(type(r).__name__ == "ModelResponse" and r.response_id.startswith("resp_")
                   for r in result.raw_responses)
    check_agent_run(seen, result)


# ---- LangChain ----

def lc_tools():
    from langchain_core.tools import StructuredTool
    return [StructuredTool.from_function(add_impl), StructuredTool.from_function(weather_impl)]


def check_lc_calls(tool_calls, tools) -> None:
    schemas = {t.name: t.args_schema.model_json_schema() for t in tools}
    assert tool_calls
    for call in tool_calls:
        assert call["id"].startswith("call_") and call["name"] in schemas
        jsonschema.validate(call["args"], schemas[call["name"]])


def test_langchain_bind_tools_stream_and_structured_output(served):
    srv, model_name = served
    llm = langchain_openai.ChatOpenAI(model=model_name, base_url=srv.url + "/v1", api_key=srv.api_key,
                                      max_tokens=MAX_TOKENS, temperature=1.0, seed=4, max_retries=0)
    tools = lc_tools()
    bound = llm.bind_tools(tools, tool_choice="required", parallel_tool_calls=False)
    message = bound.invoke("Add 2 and 3.")
    check_lc_calls(message.tool_calls, tools)
    assert len(message.tool_calls) == 1 and message.response_metadata["finish_reason"] == "tool_calls"
    merged, chunks = None, 0
    for chunk in bound.stream("Add 2 and 3."):
        chunks += 1
        for part in chunk.tool_call_chunks:
            assert part["index"] == 0
        merged = chunk if merged is None else merged + chunk
    assert chunks > 2 and len(merged.tool_call_chunks) == 1
    check_lc_calls(merged.tool_calls, tools)
    assert merged.tool_calls[0]["args"] == json.loads(merged.tool_call_chunks[0]["args"])
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [(c["name"], c["args"]) for c in message.tool_calls]

    class Weather(BaseModel):
        city: City
        unit: Annotated[str, Field(pattern="^(c|f)$")]

    structured = llm.with_structured_output(Weather, method="function_calling")
    for seed in range(3):
        out = structured.invoke("The weather?", seed=seed)
        assert isinstance(out, Weather)
        jsonschema.validate(out.model_dump(), Weather.model_json_schema())


# ---- LiteLLM ----

def test_litellm_openai_compatible_provider(served):
    srv, model_name = served
    tools = [{"type": "function", "function": {"name": "add", "description": "Add",
                                               "parameters": lc_tools()[0].args_schema.model_json_schema()}}]
    schema = tools[0]["function"]["parameters"]
    kw = dict(model=f"openai/{model_name}", api_base=srv.url + "/v1", api_key=srv.api_key, tools=tools,
              messages=[{"role": "user", "content": "Add 2 and 3."}], tool_choice="required", max_tokens=MAX_TOKENS,
              parallel_tool_calls=False, seed=9, temperature=1.0)
    whole = litellm.completion(**kw)
    [call] = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
    jsonschema.validate(json.loads(call.function.arguments), schema)
    chunks = list(litellm.completion(stream=True, **kw))
    rebuilt = litellm.stream_chunk_builder(chunks).choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in rebuilt] == [("add", call.function.arguments)]
    history = kw["messages"] + [whole.choices[0].message,
                                {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    again = litellm.completion(**{**kw, "messages": history, "tool_choice": "none", "max_tokens": 4})
    assert not again.choices[0].message.tool_calls
    assert again.usage.prompt_tokens_details.cached_tokens >= whole.usage.prompt_tokens + \
        whole.usage.completion_tokens - 1
