"""Incremental text scanning shared by the tool-call parsers (plain Python, no state between calls).

`match_parts(buf, parts)` matches a sequence of literals, optional whitespace (`WS`) and one JSON
string (`NAME`) at the start of `buf` and says whether it matched, needs more text, or cannot match.
`JsonValueEnd` finds where one JSON value ends in text that arrives in pieces.
`JsonStringDecoder` decodes the body of a JSON string as its pieces arrive.
"""

from __future__ import annotations

import json
from typing import NamedTuple, Optional

WS = object()       # any run of JSON whitespace, possibly empty
NAME = object()     # a JSON string; its decoded value is returned as the match's name
WHITESPACE = " \t\r\n"

OK, MORE, FAIL = "ok", "more", "fail"


class PartsMatch(NamedTuple):
    status: str              # OK, MORE (the text so far is a prefix of a match) or FAIL
    end: int = 0             # OK: index just past the match
    name: Optional[str] = None


def _json_string_end(buf: str, pos: int) -> Optional[int]:
    """Index just past the closing quote of the JSON string starting at buf[pos] == '"', or None."""
    i = pos + 1
    while i < len(buf):
        if buf[i] == "\\":
            i += 2
            continue
        if buf[i] == '"':
            return i + 1
        i += 1
    return None


def match_parts(buf: str, parts, pos: int = 0) -> PartsMatch:
    name = None
    for part in parts:
        if part is WS:
            while pos < len(buf) and buf[pos] in WHITESPACE:
                pos += 1
            if pos == len(buf):
                return PartsMatch(MORE)
        elif part is NAME:
            if pos == len(buf):
                return PartsMatch(MORE)
            if buf[pos] != '"':
                return PartsMatch(FAIL)
            end = _json_string_end(buf, pos)
            if end is None:
                return PartsMatch(MORE)
            try:
                name = json.loads(buf[pos:end])
            except ValueError:
                return PartsMatch(FAIL)
            pos = end
        else:
            have = buf[pos:pos + len(part)]
            if have != part:
                return PartsMatch(MORE if part.startswith(have) and pos + len(have) == len(buf) else FAIL)
            pos += len(part)
    return PartsMatch(OK, pos, name)


class JsonValueEnd:
    """Feed the text of one JSON object or array in pieces; `feed` says how much of each piece
    belongs to the value and whether the value is complete.  Text that is not an object or array
    ends the value before it (consumed 0, done)."""

    def __init__(self):
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.started = False
        self.done = False

    def feed(self, text: str) -> int:
        """How many leading characters of text are part of the value (all of them until it ends)."""
        for i, ch in enumerate(text):
            if self.done:
                return i
            if not self.started:
                if ch in WHITESPACE:
                    continue
                if ch not in "{[":
                    self.done = True
                    return i
                self.started = True
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i + 1
        return len(text)


def _complete_prefix(raw: str) -> int:
    """Length of the longest prefix of a JSON string body that ends between whole escapes (and not
    after a lone high surrogate escape that its low half may follow)."""
    i, cut = 0, 0
    while i < len(raw):
        if raw[i] != "\\":
            i += 1
            cut = i
            continue
        if i + 1 >= len(raw):
            break
        if raw[i + 1] != "u":
            i += 2
            cut = i
            continue
        if i + 6 > len(raw):
            break
        code = int(raw[i + 2:i + 6], 16) if all(c in "0123456789abcdefABCDEF" for c in raw[i + 2:i + 6]) else 0
        if 0xD800 <= code < 0xDC00:
            if i + 12 > len(raw):
                break
            i += 12
        else:
            i += 6
        cut = i
    return cut


class JsonStringDecoder:
    """Feed the raw text after a JSON string's opening quote; `feed` returns the decoded text that is
    complete so far and the count of raw characters consumed; `closed` once the closing quote came."""

    def __init__(self):
        self.raw = ""
        self.closed = False

    def feed(self, text: str) -> tuple[str, int]:
        end = _json_string_end('"' + self.raw + text, 0)
        if end is not None:
            body_len = end - 2 - len(self.raw)        # chars of text before the closing quote
            self.raw += text[:body_len]
            self.closed = True
            decoded, self.raw = self._decode(self.raw), ""
            return decoded, body_len + 1
        self.raw += text
        cut = _complete_prefix(self.raw)
        decoded, self.raw = self._decode(self.raw[:cut]), self.raw[cut:]
        return decoded, len(text)

    @staticmethod
    def _decode(body: str) -> str:
        try:
            return json.loads('"' + body + '"')
        except ValueError:
            return body
