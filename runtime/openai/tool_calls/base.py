"""What every tool-call format shares: the tools and choice of one request, the parser's events,
the whitespace hold that keeps separators out of `content`, and the structural-tag pieces.

A parser is fed the output text in pieces (`feed(delta) -> [ToolEvent]`) and closed with
`finish() -> [ToolEvent]`; the events of any split of a text equal those of the whole text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple, Optional

from radixlm.constrained.schema_normalize import declare_required_properties

EMPTY_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}
MAX_WHITESPACE = 1      # consecutive whitespace characters the grammar allows inside arguments


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict
    description: Optional[str] = None
    strict: bool = False

    def openai_dict(self) -> dict:
        """The tool as an OpenAI `tools` entry (what chat templates take)."""
        fn = {"name": self.name, "parameters": self.parameters}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolChoice:
    mode: str                      # none | auto | required | named
    name: Optional[str] = None     # named: the function
    parallel: bool = True          # False: at most one call


class ToolEvent(NamedTuple):
    kind: str                      # "text" | "call" (a call starts: name) | "args" (arguments fragment)
    text: str
    index: int = -1                # the call's index for "call" and "args"


class TextHold:
    """Text outside calls: a trailing run of whitespace or separator characters is held back; it is
    dropped when a call follows it or when the output ends after a call, and sent otherwise."""

    def __init__(self, hold_chars: str):
        self.hold_chars = hold_chars
        self.pending = ""

    def text(self, s: str) -> list:
        s = self.pending + s
        k = len(s)
        while k > 0 and s[k - 1] in self.hold_chars:
            k -= 1
        self.pending = s[k:]
        return [ToolEvent("text", s[:k])] if k else []

    def drop(self) -> None:
        self.pending = ""

    def flush(self, made_calls: bool) -> list:
        out = [] if made_calls or not self.pending else [ToolEvent("text", self.pending)]
        self.pending = ""
        return out


def arguments_schema(tool: Tool) -> dict:
    return declare_required_properties(tool.parameters)


def chosen_tools(tools: list, choice: ToolChoice) -> list:
    return [t for t in tools if t.name == choice.name] if choice.mode == "named" else list(tools)


def call_tag(begin: str, tool: Tool, end: str) -> dict:
    return {"type": "tag", "begin": begin, "end": end,
            "content": {"type": "json_schema", "json_schema": arguments_schema(tool),
                        "max_whitespace_cnt": MAX_WHITESPACE}}


def structural_tag(fmt: dict) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt})


def tagged_constraint(tags: list, triggers: list, separator: str, choice: ToolChoice) -> Optional[str]:
    """auto: free text, and a call wherever a trigger appears; required/named: only calls."""
    if choice.mode == "none" or not tags:
        return None
    if choice.mode == "auto":
        fmt = {"type": "triggered_tags", "triggers": triggers, "tags": tags,
               "stop_after_first": not choice.parallel}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": separator, "at_least_one": True,
               "stop_after_first": choice.mode == "named" or not choice.parallel}
    return structural_tag(fmt)
