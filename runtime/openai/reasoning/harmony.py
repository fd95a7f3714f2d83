"""gpt-oss's harmony format, parsed from text (decoded with its special tokens kept).

An output is a run of messages `[<|start|>assistant]<|channel|>NAME[ to=functions.F][ <|constrain|>json]
<|message|>BODY` ended by `<|end|>`, `<|call|>` or `<|return|>` (or by the end of the output).  Channel
`analysis` is reasoning; `final` is content; `commentary` addressed `to=functions.F` is a tool call
(F, BODY); commentary without a recipient (a preamble) is content.  Text outside any message (a model
that does not speak harmony) is content.  `HarmonyParser` streams the same split: bodies as they come
(a possible marker held back), a tool call once its message ends.
"""

from __future__ import annotations

import re

from radixlm.runtime.openai.reasoning.base import Parsed, partial_marker

MESSAGE, CHANNEL, START = "<|message|>", "<|channel|>", "<|start|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"(\w+)")


def _route(header: str) -> tuple[str, str | None]:
    """(reasoning | content | call, the called function) for a message header."""
    to = _RECIPIENT.search(header)
    if to:
        return "call", to.group(1)
    channel = _CHANNEL.search(header)
    return ("reasoning" if channel and channel.group(1) == "analysis" else "content"), None


def parse_whole(text: str) -> Parsed:
    parser = HarmonyParser()
    out = parser.feed(text)
    out += parser.finish()
    return out


class HarmonyParser:
    """feed(delta) -> Parsed for the new text; finish() -> Parsed for what was held back."""

    def __init__(self):
        self.buf = ""
        self.route = None          # None: between messages (reading a header); else where the body goes
        self.function = None
        self.call_body = ""

    def feed(self, delta: str) -> Parsed:
        self.buf += delta
        out = Parsed()
        while True:
            if self.route is None:
                at = self.buf.find(MESSAGE)
                if at < 0:
                    out += self._stray_text()
                    return out
                self.route, self.function = _route(self.buf[:at])
                self.buf, self.call_body = self.buf[at + len(MESSAGE):], ""
                continue
            ends = [(self.buf.find(e), e) for e in ENDS if e in self.buf]
            if not ends:
                hold = partial_marker(self.buf, ENDS)
                out += self._body(self.buf[:hold])
                self.buf = self.buf[hold:]
                return out
            at, marker = min(ends)
            out += self._body(self.buf[:at])
            out += self._end_message()
            self.buf = self.buf[at + len(marker):]

    def _stray_text(self) -> Parsed:
        """Between messages: text before a header's markers is content (a model off the format)."""
        first = min([i for i in (self.buf.find(START), self.buf.find(CHANNEL)) if i >= 0] or
                    [partial_marker(self.buf, (START, CHANNEL))])
        text, self.buf = self.buf[:first], self.buf[first:]
        return Parsed(content=text)

    def _body(self, text: str) -> Parsed:
        if self.route == "call":
            self.call_body += text
            return Parsed()
        return Parsed(**{self.route: text}) if text else Parsed()

    def _end_message(self) -> Parsed:
        out = Parsed(calls=[(self.function, self.call_body)]) if self.route == "call" else Parsed()
        self.route, self.function, self.call_body = None, None, ""
        return out

    def finish(self) -> Parsed:
        if self.route is None:
            rest, self.buf = self.buf, ""
            header_only = MESSAGE not in rest and (START in rest or CHANNEL in rest)
            return Parsed() if header_only else Parsed(content=rest)
        out = self._body(self.buf)
        self.buf = ""
        out += self._end_message()
        return out
