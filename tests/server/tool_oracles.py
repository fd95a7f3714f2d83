"""Tool sets, requests and the oracles shared by the tool-calling server tests."""

import json
import random

import jsonschema

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                                         "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                         "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "set_flags", "strict": True, "parameters": {
        "type": "object", "properties": {"on": {"type": "boolean"},
                                         "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]},
                                                  "maxItems": 2}},
        "required": ["on", "tags"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "ping"}},
]
SCHEMAS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in TOOLS}
QUESTIONS = ["What is the weather in Paris?", "Add 2 and 3.", "Turn the flags on.", "Ping the server.", "Hello!"]


def varied_requests(count: int, modes, seed: int = 0) -> list:
    """[(kwargs for chat.completions.create, mode)]: random subsets of the tools, questions and seeds."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
        mode = modes[k % len(modes)]
        kw = {"messages": [{"role": "user", "content": rng.choice(QUESTIONS)}], "tools": tools,
              "seed": rng.randrange(1 << 30), "temperature": 1.0}
        if mode == "named":
            kw["tool_choice"] = {"type": "function", "function": {"name": rng.choice(tools)["function"]["name"]}}
        elif mode == "single":
            kw.update(tool_choice="required", parallel_tool_calls=False)
        else:
            kw["tool_choice"] = mode
        out.append((kw, mode))
    return out


def check_calls(tool_calls, tools: list) -> list:
    """Every call names one of the tools and its arguments validate against its schema; returns
    [(name, arguments)]."""
    names = {t["function"]["name"] for t in tools}
    calls = []
    for call in tool_calls or []:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in names, call
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, SCHEMAS[call.function.name])
        calls.append((call.function.name, args))
    return calls


def check_choice(resp_choice, kw: dict, mode: str) -> None:
    """The invariants of one request's choice under its tool_choice mode."""
    msg = resp_choice.message
    assert resp_choice.finish_reason in ("tool_calls", "stop", "length")
    if mode == "none":
        assert not msg.tool_calls and resp_choice.finish_reason != "tool_calls"
        return
    if mode in ("named", "single"):
        assert resp_choice.finish_reason == "tool_calls", resp_choice     # one complete call, then the end
    if resp_choice.finish_reason == "length":        # parallel calls cut inside the last one
        assert mode in ("required", "auto")
        check_calls((msg.tool_calls or [])[:-1], kw["tools"])
        return
    calls = check_calls(msg.tool_calls, kw["tools"])
    if resp_choice.finish_reason == "tool_calls":
        assert calls and (msg.content is None or msg.content.strip())
    if mode in ("named", "single"):
        assert len(calls) == 1
    if mode == "named":
        assert calls[0][0] == kw["tool_choice"]["function"]["name"]
