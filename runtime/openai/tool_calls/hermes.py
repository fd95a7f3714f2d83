"""hermes (Qwen2.5, Qwen3, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
blocks in the text; the chat template renders the tools and the `<tool_response>` results."""

from radixlm.runtime.openai.tool_calls.base import ToolChoice, call_tag, chosen_tools, tagged_constraint
from radixlm.runtime.openai.tool_calls.scan import NAME, WS
from radixlm.runtime.openai.tool_calls.tagged import TaggedCallParser

NAME_ = "hermes"
TRIGGER = "<tool_call>"
_HEADER = [TRIGGER, WS, "{", WS, '"name"', WS, ":", WS, NAME, WS, ",", WS, '"arguments"', WS, ":", WS]
_FOOTER = [WS, "}", WS, "</tool_call>"]


def detect(template: str) -> bool:
    return TRIGGER in template


def constraint(tools: list, choice: ToolChoice):
    tags = [call_tag(f'{TRIGGER}\n{{"name": "{t.name}", "arguments": ', t, "}\n</tool_call>")
            for t in chosen_tools(tools, choice)]
    return tagged_constraint(tags, [TRIGGER], "\n", choice)


def parser() -> TaggedCallParser:
    return TaggedCallParser([_HEADER], _FOOTER, hold_chars=" \t\r\n")


def template_kwargs(tools: list) -> dict:
    return {"tools": [t.openai_dict() for t in tools]} if tools else {}
