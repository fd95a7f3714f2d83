"""The tool fields of a chat request (`tools`, `tool_choice`, `parallel_tool_calls`, and the legacy
`functions` / `function_call`) resolved to [Tool] and a ToolChoice, with a 400 naming the field."""

from __future__ import annotations

import re

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.tool_calls.base import EMPTY_PARAMETERS, Tool, ToolChoice

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def _tool(entry, param: str) -> Tool:
    if not isinstance(entry, dict):
        raise APIError(400, f"{param} must be an object", param=param)
    params = entry.get("parameters")
    if params is None:
        params = EMPTY_PARAMETERS
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise APIError(400, f"{param}.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}",
                       param=f"{param}.name")
    if not isinstance(params, dict):
        raise APIError(400, f"{param}.parameters must be a JSON schema object", param=f"{param}.parameters")
    return Tool(name, params, entry.get("description"), bool(entry.get("strict")))


def parse_tools(tools, functions) -> list:
    if tools and functions:
        raise APIError(400, "give tools or the legacy functions, not both", param="functions")
    out = []
    for i, entry in enumerate(tools or []):
        if not isinstance(entry, dict) or entry.get("type", "function") != "function":
            kind = entry.get("type") if isinstance(entry, dict) else entry
            raise APIError(400, f"tools[{i}]: only function tools are supported, got {kind!r}", param=f"tools.{i}")
        out.append(_tool(entry.get("function"), f"tools.{i}.function"))
    for i, entry in enumerate(functions or []):
        out.append(_tool(entry, f"functions.{i}"))
    names = [t.name for t in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise APIError(400, f"two tools are named {dup!r}", param="tools" if tools else "functions")
    return out


def _named(name, tools: list, param: str, parallel: bool) -> ToolChoice:
    if not isinstance(name, str) or name not in {t.name for t in tools}:
        given = ", ".join(t.name for t in tools) or "none"
        raise APIError(400, f"{param} names the function {name!r}, which is not among the given tools ({given})",
                       param=param)
    return ToolChoice("named", name, parallel)


def parse_choice(tool_choice, function_call, tools: list, parallel) -> ToolChoice:
    parallel = True if parallel is None else bool(parallel)
    param = "tool_choice" if tool_choice is not None or function_call is None else "function_call"
    choice = tool_choice if tool_choice is not None else function_call
    if choice is None:
        return ToolChoice("auto" if tools else "none", None, parallel)
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise APIError(400, f"{param} must be none, auto, required or a function, got {choice!r}", param=param)
        if choice != "none" and not tools:
            raise APIError(400, f"{param} is {choice!r} but no tools were given", param=param)
        return ToolChoice(choice, None, parallel)
    if not isinstance(choice, dict):
        raise APIError(400, f"{param} must be a string or an object", param=param)
    if param == "function_call":
        return _named(choice.get("name"), tools, param, parallel)
    fn = choice.get("function")
    if choice.get("type") != "function" or not isinstance(fn, dict):
        raise APIError(400, 'tool_choice must look like {"type": "function", "function": {"name": ...}}',
                       param=param)
    return _named(fn.get("name"), tools, f"{param}.function.name", parallel)


def parse_response_tools(tools) -> list:
    """The `tools` of a /v1/responses request (flat: {"type": "function", "name", "parameters", "strict"});
    `strict` defaults to true there, as in OpenAI's Responses API."""
    out = []
    for i, entry in enumerate(tools or []):
        if not isinstance(entry, dict) or entry.get("type") != "function":
            kind = entry.get("type") if isinstance(entry, dict) else entry
            raise APIError(400, f"tools[{i}]: only function tools are supported, got {kind!r}", param=f"tools.{i}")
        tool = _tool(entry, f"tools.{i}")
        out.append(Tool(tool.name, tool.parameters, tool.description, entry.get("strict") is not False))
    names = [t.name for t in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise APIError(400, f"two tools are named {dup!r}", param="tools")
    return out


def parse_response_choice(tool_choice, tools: list, parallel) -> tuple:
    """(the tools calls may use, ToolChoice) for a /v1/responses tool_choice: none, auto, required,
    {"type": "function", "name"}, or {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}
    (calls limited to those named; the prompt still lists every tool, so it stays cacheable)."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        return tools, _named(tool_choice.get("name"), tools, "tool_choice.name",
                             True if parallel is None else bool(parallel))
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools":
        mode = tool_choice.get("mode", "auto")
        allowed = tool_choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list) or not allowed:
            raise APIError(400, 'tool_choice allowed_tools needs mode auto or required and a non-empty tools list',
                           param="tool_choice")
        names = []
        for j, entry in enumerate(allowed):
            name = entry.get("name") if isinstance(entry, dict) and entry.get("type") == "function" else None
            _named(name, tools, f"tool_choice.tools.{j}.name", True)
            names.append(name)
        return [t for t in tools if t.name in names], parse_choice(mode, None, tools, parallel)
    if isinstance(tool_choice, dict):
        raise APIError(400, 'tool_choice must be none, auto, required, {"type": "function", "name": ...} or '
                            '{"type": "allowed_tools", ...}', param="tool_choice")
    return tools, parse_choice(tool_choice, None, tools, parallel)


def check_tools_fit(tools: list, choice: ToolChoice, prompt_len: int, context_len: int) -> None:
    if choice.mode != "none" and prompt_len >= context_len:
        raise APIError(400, f"the messages with their {len(tools)} tools take {prompt_len} tokens, more than this "
                            f"model's context length of {context_len}; send fewer or shorter tools", param="tools")


def add_tool_grammar(sp: dict, fmt, tools: list, choice: ToolChoice) -> bool:
    """Put the format's tool-call grammar into the sampling params; False when the output is not the
    format's (no call can be made, and no answer shape is asked for)."""
    constraint = fmt.constraint(tools, choice)
    if constraint is None:
        return False
    if any(k in sp for k in ("json_schema", "regex", "ebnf")):
        if choice.mode == "none":
            return False            # the request's own grammar shapes the answer
        raise APIError(400, "response_format (or json_schema, regex, ebnf) cannot be combined with tools "
                            "unless tool_choice is none", param="response_format")
    sp["structural_tag"] = constraint
    return True
