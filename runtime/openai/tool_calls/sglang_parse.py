"""SGLang's native `POST /parse_function_call`, for DSL users who build prompts by hand and parse the
output afterwards: `{"text", "tool_call_parser", "tools"}` -> `{"normal_text", "calls": [{"tool_index",
"name", "parameters"}]}`, as SGLang's http_server answers (FunctionCallParser.parse_non_stream), with the
parsers of this package.

As SGLang does: no tools -> the text unchanged and no calls; a call to a function not in `tools`
is dropped; `parameters` is the arguments re-serialized by json.dumps(ensure_ascii=False);
`tool_index` is the function's index in `tools`; when the text holds a call, `normal_text` is the
text before the first call (hermes, as SGLang's qwen25/hermes detectors) or outside calls (the other
formats), stripped; a call whose arguments are not complete JSON is dropped.
SGLang's parser names map onto these formats: qwen, qwen25, hermes -> hermes; llama3 -> llama3_json;
our own names (hermes, llama3_json, generic) work too.  No tool_call_parser: the server's format.
"""

from __future__ import annotations

import json

from fastapi import Request

from radixlm.runtime.api.http import APIError, json_response, read_json
from radixlm.runtime.openai.tool_calls import FORMATS, choose_format, hermes
from radixlm.runtime.openai.tool_calls.request import parse_tools

SGLANG_NAMES = {"qwen": "hermes", "qwen25": "hermes", "hermes": "hermes", "llama3": "llama3_json",
                "llama3_json": "llama3_json", "generic": "generic"}
_FIELDS = {"text", "tools", "tool_call_parser", "rid", "rids", "http_worker_ipc", "http_worker_ipcs"}


def resolve_format(name, default):
    if name is None:
        return default
    if name not in SGLANG_NAMES:
        raise APIError(400, f"Unsupported tool_call_parser: {name!r}; this server parses "
                            f"{', '.join(sorted(SGLANG_NAMES))}", param="tool_call_parser")
    return FORMATS[SGLANG_NAMES[name]]


def parse_function_call(text: str, tools: list, fmt) -> dict:
    if not tools:
        return {"normal_text": text, "calls": []}
    index = {t.name: i for i, t in enumerate(tools)}
    parser = fmt.parser()
    content, before, calls = "", "", []
    for ev in parser.feed(text) + parser.finish():
        if ev.kind == "text":
            content += ev.text
            before += ev.text if not calls else ""
        elif ev.kind == "call":
            calls.append([ev.text, ""])
        else:
            calls[ev.index][1] += ev.text
    if not calls:
        return {"normal_text": text, "calls": []}
    out = []
    for name, args in calls:
        try:
            parsed = json.loads(args)
        except ValueError:
            continue
        if name in index and isinstance(parsed, dict):
            out.append({"tool_index": index[name], "name": name,
                        "parameters": json.dumps(parsed, ensure_ascii=False)})
    normal = before if fmt is hermes else content      # SGLang's hermes/qwen25 keep only the text before
    return {"normal_text": normal.strip(), "calls": out}


def add_parse_function_call_route(app, state, parser_option=None) -> None:
    @app.post("/parse_function_call")
    async def parse_function_call_route(request: Request):
        body = await read_json(request)
        unknown = sorted(set(body) - _FIELDS)
        if unknown:
            raise APIError(400, f"unknown field(s): {', '.join(unknown)}", param=unknown[0])
        text = body.get("text")
        if not isinstance(text, str):
            raise APIError(400, "text must be a string", param="text")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise APIError(400, "tools must be a list of function tools", param="tools")
        default = choose_format(getattr(state.tm.tokenizer, "chat_template", None), parser_option)
        fmt = resolve_format(body.get("tool_call_parser"), default)
        return json_response(parse_function_call(text, parse_tools(tools, None), fmt))
