"""The default model, SmolLM2-135M-Instruct, served with Qwen3's real thinking template (--chat-template; the
qwen3 reasoning parser follows it): every turn thinks within its budget, then a forced tool call or a
JSON-schema answer validates (jsonschema), and the thinking comes back as reasoning_content."""

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
from reasoning_models import DATA
from server_harness import ServerProcess
from tool_oracles import SCHEMAS, TOOLS

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    srv = ServerProcess("smollm2-135m-instruct", tmp_path_factory.mktemp("logs"), "--chat-template",
                        str(DATA / "qwen3.jinja"), "--max-total-tokens", "16384", "--check-ledger").wait_ready()
    yield openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.api_key)
    assert srv.proc.poll() is None, srv.log()[-3000:]
    srv.stop()


@pytest.mark.slow
def test_smollm2_thinks_then_answers_validly(client):
    def one(seed):
        kw = dict(model="default", messages=[{"role": "user", "content": "Plan a trip to Paris."}], temperature=1.0,
                  seed=seed, max_tokens=96, extra_body={"max_thinking_tokens": 16})
        if seed % 2:
            kw.update(tools=TOOLS[:2], tool_choice={"type": "function", "function": {"name": "get_weather"}})
        else:
            kw["response_format"] = {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}}
        return seed, client.chat.completions.create(**kw).choices[0]

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(one, range(8)))
    for seed, c in outs:
        assert c.message.model_extra["reasoning_content"], (seed, c)
        assert "</think>" not in (c.message.content or "")
        if seed % 2:
            [call] = c.message.tool_calls
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS["get_weather"])
        else:
            jsonschema.validate(json.loads(c.message.content), SCHEMA)
