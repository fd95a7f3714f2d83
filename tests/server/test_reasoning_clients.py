"""Real clients, unchanged, against a thinking model (a tiny random Qwen3 with Qwen3's real template): the
OpenAI Agents SDK (a Runner loop of two forced tool turns, on the Responses and the chat model), LangChain's
ChatOpenAI (bind_tools, with_structured_output) and the openai SDK's `reasoning_content` (model_extra).
Oracles: jsonschema on every call and answer; the second turn hits the cache for all of the first (the
reasoning the clients send back re-encodes to the generated tokens); content never holds the thinking."""

import asyncio
import json
import os
from typing import Annotated

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
agents = pytest.importorskip("agents")
langchain_openai = pytest.importorskip("langchain_openai")
agents.set_tracing_disabled(True)

THINK = {"max_thinking_tokens": 10}
Small = Annotated[int, Field(ge=0, le=99)]


@pytest.fixture(scope="module")
def served(thinking_server):
    return thinking_server("qwen3")


def add(a: Small, b: Small) -> int:
    """Add two small integers."""
    return a + b


def twice(a: Small) -> int:
    """Double a small integer."""
    return 2 * a


@pytest.mark.parametrize("api", ["responses", "chat_completions", "chat_completions_replayed"])
def test_agents_loop_with_thinking(served, api):
    """On chat completions the SDK replays reasoning_content only when told to (its default: DeepSeek
    models): without it the template renders the turn without its thinking, and the cache hits the
    previous prompt only."""
    client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key=served.api_key)
    if api == "responses":
        model = agents.OpenAIResponsesModel("default", client)
    else:
        replay = (lambda ctx: True) if api.endswith("replayed") else None
        model = agents.OpenAIChatCompletionsModel("default", client, should_replay_reasoning_content=replay)
    seen, turns = [], []

    def tool(fn):
        base = agents.function_tool(fn)

        async def run(ctx, args: str):
            parsed = json.loads(args)
            jsonschema.validate(parsed, base.params_json_schema)
            seen.append(fn.__name__)
            return str(fn(**parsed))
        return agents.FunctionTool(name=fn.__name__, description=base.description,
                                   params_json_schema=base.params_json_schema, on_invoke_tool=run)

    def behavior(ctx, results):
        turns.append(1)
        return agents.ToolsToFinalOutputResult(is_final_output=len(turns) == 2, final_output="done")

    settings = agents.ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=160,
                                    temperature=1.0, include_usage=True, extra_body=THINK)
    agent = agents.Agent(name="calc", instructions="Use the tools.", tools=[tool(add), tool(twice)], model=model,
                         model_settings=settings, reset_tool_choice=False, tool_use_behavior=behavior)
    result = asyncio.run(agents.Runner.run(agent, "Add 2 and 3, then double it.", max_turns=4))
    assert len(seen) == 2 and result.final_output == "done"
    first, second = result.raw_responses
    whole_turn = first.usage.input_tokens + first.usage.output_tokens - 1
    if api == "chat_completions":
        thought = "".join(part.text for item in first.output if getattr(item, "type", "") == "reasoning"
                          for part in (getattr(item, "summary", None) or []))
        cached = second.usage.input_tokens_details.cached_tokens
        assert first.usage.input_tokens - 1 <= cached <= whole_turn
        assert cached < whole_turn or not thought.strip(), "the thinking text was dropped, so its tokens are not hit"
    else:
        assert second.usage.input_tokens_details.cached_tokens >= whole_turn     # the thinking came back verbatim


def test_langchain_reads_answers_without_thinking(served):
    llm = langchain_openai.ChatOpenAI(model="default", base_url=served.url + "/v1", api_key=served.api_key,
                                      max_tokens=160, temperature=1.0, seed=3, max_retries=0, extra_body=THINK)
    bound = llm.bind_tools([add], tool_choice="required", parallel_tool_calls=False)
    message = bound.invoke("Add 2 and 3.")
    [call] = message.tool_calls
    assert call["name"] == "add" and set(call["args"]) == {"a", "b"}
    assert "<think>" not in message.content and "</think>" not in message.content

    class Pick(BaseModel):
        a: Small
        word: Annotated[str, Field(pattern="^(yes|no)$")]

    for seed in range(3):
        out = llm.with_structured_output(Pick, method="json_schema").invoke("Pick.", seed=seed)
        assert isinstance(out, Pick)


def test_openai_sdk_reasoning_content_in_model_extra(served):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key=served.api_key)
    whole = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=30, temperature=0, extra_body=THINK)
    msg = whole.choices[0].message
    assert "reasoning_content" in msg.model_extra and "</think>" not in (msg.content or "")
    raw = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=30, temperature=0,
                                         extra_body={**THINK, "separate_reasoning": False}).choices[0].message
    assert raw.content.startswith(msg.model_extra["reasoning_content"] or "") or "</think>" in raw.content
