"""One choice's output text -> OpenAI tool calls: the whole message, or stream deltas as text arrives.

Stream contract: a call's first delta carries index, id, type, function.name and arguments ""; the
ones after it carry only index and a non-empty arguments fragment.  finish_reason is "tool_calls"
when a call was made and the output stopped (not cut by length); legacy `functions` requests get
`function_call` and "function_call" instead.
"""

from __future__ import annotations

import uuid
from typing import Optional


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class ChoiceTools:
    def __init__(self, fmt, legacy: bool = False):
        self.parser = fmt.parser()
        self.legacy = legacy
        self.calls: list = []         # [id, name, arguments text]
        self.content = ""
        self.finished = False

    def _apply(self, events) -> list:
        """Update the calls and content; returns the stream delta bodies, in order."""
        bodies = []
        for ev in events:
            if ev.kind == "text":
                self.content += ev.text
                bodies.append({"content": ev.text})
            elif ev.kind == "call":
                self.calls.append([new_call_id(), ev.text, ""])
                bodies.append(self._call_delta(ev.index, first=True))
            elif ev.text:
                self.calls[ev.index][2] += ev.text
                bodies.append(self._call_delta(ev.index, fragment=ev.text))
        return bodies

    def _call_delta(self, index: int, first: bool = False, fragment: str = "") -> dict:
        call_id, name, _ = self.calls[index]
        fn = {"name": name, "arguments": ""} if first else {"arguments": fragment}
        if self.legacy:
            return {"function_call": fn}
        entry = {"index": index, "id": call_id, "type": "function", "function": fn} if first else \
            {"index": index, "function": fn}
        return {"tool_calls": [entry]}

    def feed(self, delta: str) -> list:
        return self._apply(self.parser.feed(delta)) if delta else []

    def finish(self) -> list:
        if self.finished:
            return []
        self.finished = True
        return self._apply(self.parser.finish())

    def finish_reason(self, reason: Optional[str]) -> Optional[str]:
        if reason == "stop" and self.calls:
            return "function_call" if self.legacy else "tool_calls"
        return reason

    def message_fields(self) -> dict:
        """content, function_call and tool_calls of the whole message (after finish)."""
        content = self.content if (self.content or not self.calls) else None
        if not self.calls:
            return {"content": content}
        if self.legacy:
            _, name, args = self.calls[0]
            return {"content": content, "function_call": {"name": name, "arguments": args}}
        return {"content": content, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in self.calls]}

    def saved_calls(self) -> list:
        return [tuple(c) for c in self.calls]
