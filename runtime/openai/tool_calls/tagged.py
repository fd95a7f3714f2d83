"""The parser of formats whose calls are blocks inside free text (hermes, llama3_json).

A call starts where one of the `headers` (parts for `scan.match_parts`, starting with a literal
trigger) matches; its arguments are one JSON object streamed as it arrives; the `footer` closes it.
Text before, between and after calls is content.  A header that cannot match is content too.
"""

from __future__ import annotations

from radixlm.runtime.openai.tool_calls.base import TextHold, ToolEvent
from radixlm.runtime.openai.tool_calls.scan import FAIL, MORE, OK, JsonValueEnd, match_parts

TEXT, HEADER, ARGS, FOOTER = "text", "header", "args", "footer"


class TaggedCallParser:
    def __init__(self, headers: list, footer: list, hold_chars: str):
        self.headers = headers
        self.triggers = sorted({h[0] for h in headers})
        self.footer = footer
        self.hold = TextHold(hold_chars)
        self.state = TEXT
        self.buf = ""
        self.calls = 0
        self.args = None

    def feed(self, delta: str) -> list:
        self.buf += delta
        events, progressed = [], True
        while progressed and self.buf:
            progressed = getattr(self, "_" + self.state)(events)
        return events

    def finish(self) -> list:
        events = []
        if self.state in (TEXT, HEADER) and self.buf:
            events += self.hold.text(self.buf)
        self.buf = ""
        self.state = TEXT
        return events + self.hold.flush(self.calls > 0)

    # each step consumes what it can and says whether another step may progress
    def _text(self, events) -> bool:
        starts = [i for i in (self.buf.find(t) for t in self.triggers) if i >= 0]
        if starts:
            cut = min(starts)
        else:
            cut = len(self.buf) - self._partial_trigger_len()
        if cut:
            events += self.hold.text(self.buf[:cut])
            self.buf = self.buf[cut:]
        if starts:
            self.state = HEADER
            return True
        return False

    def _partial_trigger_len(self) -> int:
        """Length of the longest suffix of buf that is a proper prefix of a trigger."""
        best = 0
        for t in self.triggers:
            for k in range(min(len(t) - 1, len(self.buf)), best, -1):
                if self.buf.endswith(t[:k]):
                    best = k
                    break
        return best

    def _header(self, events) -> bool:
        results = [match_parts(self.buf, h) for h in self.headers]
        done = next((r for r in results if r.status == OK), None)
        if done is not None:
            self.hold.drop()
            events.append(ToolEvent("call", done.name, self.calls))
            self.buf = self.buf[done.end:]
            self.args = JsonValueEnd()
            self.state = ARGS
            return True
        if any(r.status == MORE for r in results):
            return False
        events += self.hold.text(self.buf[0])     # not a call after all: its first character is text
        self.buf = self.buf[1:]
        self.state = TEXT
        return True

    def _args(self, events) -> bool:
        n = self.args.feed(self.buf)
        if n:
            events.append(ToolEvent("args", self.buf[:n], self.calls))
            self.buf = self.buf[n:]
        if not self.args.done:
            return False
        self.calls += 1
        self.state = FOOTER
        return True

    def _footer(self, events) -> bool:
        result = match_parts(self.buf, self.footer)
        if result.status == MORE:
            return False
        if result.status == OK:
            self.buf = self.buf[result.end:]
        self.state = TEXT
        return result.status != FAIL or bool(self.buf)
