"""llama3_json (Llama 3.1 / 3.2): a call is `{"name": ..., "parameters": {...}}`, optionally after
`<|python_tag|>`; several calls are separated by `; `.  The chat template renders the tools."""

from radixlm.runtime.openai.tool_calls.base import ToolChoice, call_tag, chosen_tools, tagged_constraint
from radixlm.runtime.openai.tool_calls.scan import NAME, WS
from radixlm.runtime.openai.tool_calls.tagged import TaggedCallParser

NAME_ = "llama3_json"
PYTHON_TAG = "<|python_tag|>"
TRIGGER = '{"name": '          # the grammar's trigger: text that starts differently is content
_CALL = [TRIGGER, WS, NAME, WS, ",", WS, '"parameters"', WS, ":", WS]
_FOOTER = [WS, "}"]


def detect(template: str) -> bool:
    return PYTHON_TAG in template or ('"parameters"' in template and "tools" in template)


def constraint(tools: list, choice: ToolChoice):
    tags = [call_tag(f'{TRIGGER}"{t.name}", "parameters": ', t, "}") for t in chosen_tools(tools, choice)]
    return tagged_constraint(tags, [TRIGGER], "; ", choice)


def parser() -> TaggedCallParser:
    return TaggedCallParser([[PYTHON_TAG, WS] + _CALL, _CALL], _FOOTER, hold_chars=" \t\r\n;")


def template_kwargs(tools: list) -> dict:
    return {"tools": [t.openai_dict() for t in tools]} if tools else {}
