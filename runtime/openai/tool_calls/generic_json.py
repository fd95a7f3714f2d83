"""generic: for chat templates that ignore `tools` (the default SmolLM2 among them).  radixlm adds a
system prompt listing the tools, and the whole answer is one JSON object, as llama.cpp's generic
handler does: `{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}` or `{"response": "..."}`.
An answer that is neither (tool_choice none, or no grammar) is plain content."""

from __future__ import annotations

import json

from radixlm.runtime.openai.tool_calls.base import (
    TextHold,
    ToolChoice,
    ToolEvent,
    call_tag,
    chosen_tools,
    structural_tag,
)
from radixlm.runtime.openai.tool_calls.scan import (
    MORE,
    NAME,
    OK,
    WS,
    JsonStringDecoder,
    JsonValueEnd,
    match_parts,
)

NAME_ = "generic"
_CALLS_OPEN = [WS, "{", WS, '"tool_calls"', WS, ":", WS, "["]
_RESPONSE_OPEN = [WS, "{", WS, '"response"', WS, ":", WS, '"']
_CALL = [WS, "{", WS, '"name"', WS, ":", WS, NAME, WS, ",", WS, '"arguments"', WS, ":", WS]
_CALL_CLOSE = [WS, "}"]
_NEXT = [WS, ","]
_CALLS_CLOSE = [WS, "]", WS, "}"]
_RESPONSE_CLOSE = [WS, "}"]


def detect(template: str) -> bool:
    return True


def system_prompt(tools: list) -> str:
    """The same text whatever the tool_choice (the grammar enforces the choice), so the turns of one
    agent loop share their prefix in the radix cache when the choice changes between them."""
    listed = json.dumps([t.openai_dict()["function"] for t in tools])
    shapes = ('{"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]} or, to answer without '
              'a tool, {"response": <your answer as a string>}')
    return f"You can call these tools: {listed}\nAnswer with one JSON object: {shapes}."


def calls_text(calls: list) -> str:
    """An assistant turn's calls [(name, arguments dict)] as this format writes them."""
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})


def template_kwargs(tools: list) -> dict:
    return {}


def constraint(tools: list, choice: ToolChoice):
    """none: only the answer shape (what the system prompt asks for); auto: either; else only calls."""
    response = {"type": "tag", "begin": '{"response": ', "end": "}",
                "content": {"type": "json_schema", "json_schema": {"type": "string"}}}
    if choice.mode == "none":
        return structural_tag(response) if tools else None
    tags = [call_tag(f'{{"name": "{t.name}", "arguments": ', t, "}") for t in chosen_tools(tools, choice)]
    if not tags:
        return None
    single = choice.mode == "named" or not choice.parallel
    calls = {"type": "tag", "begin": '{"tool_calls": [', "end": "]}",
             "content": {"type": "tags_with_separator", "tags": tags, "separator": ", ", "at_least_one": True,
                         "stop_after_first": single}}
    if choice.mode != "auto":
        return structural_tag(calls)
    return structural_tag({"type": "or", "elements": [calls, response]})


class GenericParser:
    def __init__(self):
        self.state = "start"
        self.buf = ""
        self.calls = 0
        self.hold = TextHold(" \t\r\n")
        self.args = self.string = None

    def feed(self, delta: str) -> list:
        self.buf += delta
        events = []
        while self.buf and getattr(self, "_" + self.state)(events):
            pass
        return events

    def finish(self) -> list:
        events = []
        if self.state in ("start", "text"):
            events += self.hold.text(self.buf)
        self.buf, self.state = "", "done"
        return events + self.hold.flush(self.calls > 0)

    def _expect(self, parts, on_ok: str, on_fail: str):
        """Match parts at the start of buf: consume and go to on_ok, or go to on_fail; None: wait."""
        result = match_parts(self.buf, parts)
        if result.status == MORE:
            return None
        if result.status == OK:
            self.buf = self.buf[result.end:]
        self.state = on_ok if result.status == OK else on_fail
        return result

    def _start(self, events) -> bool:
        calls, response = match_parts(self.buf, _CALLS_OPEN), match_parts(self.buf, _RESPONSE_OPEN)
        if MORE in (calls.status, response.status):
            return False
        if calls.status == OK:
            self.buf, self.state = self.buf[calls.end:], "first_call"
        elif response.status == OK:
            self.buf, self.state, self.string = self.buf[response.end:], "response", JsonStringDecoder()
        else:
            self.state = "text"
        return True

    def _text(self, events) -> bool:
        events += self.hold.text(self.buf)
        self.buf = ""
        return False

    def _response(self, events) -> bool:
        decoded, used = self.string.feed(self.buf)
        self.buf = self.buf[used:]
        events += self.hold.text(decoded) if decoded else []
        if self.string.closed:
            self.state = "response_close"
        return self.string.closed

    def _response_close(self, events) -> bool:
        return self._expect(_RESPONSE_CLOSE, "done", "done") is not None

    def _first_call(self, events) -> bool:
        if self._expect(_CALLS_CLOSE, "done", "call") is None:
            return False
        return True

    def _call(self, events) -> bool:
        result = self._expect(_CALL, "args", "done")
        if result is None:
            return False
        if result.status == OK:
            events.append(ToolEvent("call", result.name, self.calls))
            self.args = JsonValueEnd()
        return True

    def _args(self, events) -> bool:
        n = self.args.feed(self.buf)
        if n:
            events.append(ToolEvent("args", self.buf[:n], self.calls))
            self.buf = self.buf[n:]
        if self.args.done:
            self.calls += 1
            self.state = "call_close"
        return self.args.done

    def _call_close(self, events) -> bool:
        return self._expect(_CALL_CLOSE, "after_call", "done") is not None

    def _after_call(self, events) -> bool:
        result = match_parts(self.buf, _NEXT)
        if result.status == MORE:
            return False
        if result.status == OK:
            self.buf, self.state = self.buf[result.end:], "call"
            return True
        return self._expect(_CALLS_CLOSE, "done", "done") is not None

    def _done(self, events) -> bool:
        self.buf = ""
        return False


def parser() -> GenericParser:
    return GenericParser()
