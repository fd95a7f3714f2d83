"""No key twice in one JSON object: a matcher wrapper that masks the tokens which would close a repeated key.

A grammar cannot remember which names an object already holds, so where a schema leaves names open
(`additionalProperties`, `patternProperties`, a value with no schema) XGrammar and llguidance both let a
model write `{"type": 1, "type": 1, ...}` until `max_tokens`; a small model at temperature 0 does.  JSON
parsers keep the last of the duplicates (RFC 8259 says names SHOULD be unique), so such output is
never what the user asked for.  `UniqueKeys` follows the JSON text its matcher accepts (`KeyScanner`,
on the tokens' bytes) and, in `fill_bitmask`, clears the tokens whose text would complete a name the
current object already holds (inside the name, or a whole `"name"` / `, "name"` from before it).
Every output it lets through is one the grammar admits, so validity is unchanged; where clearing would
leave no token at all (a schema whose every allowed name is used), the grammar's mask is kept whole.

Names are compared as written (raw JSON text between the quotes): `"a"` and `"\\u0061"` are not caught.
`accept_token` is the grammar's own: it does not refuse a repeated name (a draft token the mask would
clear is then rejected by the verify step's masked sampling, as any token off the mask is).
"""

from __future__ import annotations

from bisect import bisect_left

_SPACE = b" \t\n\r"


class KeyVocab:
    """The tokens' bytes, sorted, to find the tokens that start with a given text."""

    def __init__(self, pieces: list):
        order = sorted(range(len(pieces)), key=lambda i: pieces[i])
        self.pieces = pieces
        self._sorted = [pieces[i] for i in order]
        self._ids = order

    def starting_with(self, prefix: bytes) -> list:
        out = []
        i = bisect_left(self._sorted, prefix)
        while i < len(self._sorted) and self._sorted[i].startswith(prefix):
            out.append(self._ids[i])
            i += 1
        return out


class _Object:
    __slots__ = ("keys", "expect")

    def __init__(self):
        self.keys: set = set()
        self.expect = "key"          # key, colon, value, comma


class KeyScanner:
    """Reads JSON text byte by byte and knows, at the end, the open objects' names and where it stands."""

    def __init__(self):
        self.stack: list = []        # _Object | "[" per open container
        self.in_string = self.escaped = self.in_key = False
        self.buf = bytearray()       # the name being written (raw, between the quotes)
        self.scalar = False          # inside a number or literal

    def feed(self, data: bytes) -> None:
        if self.in_string and not self.escaped and b'"' not in data and b"\\" not in data:
            if self.in_key:          # the whole piece stays inside the string
                self.buf += data
            return
        for byte in data:
            self._byte(byte)

    def _top_object(self):
        return self.stack[-1] if self.stack and isinstance(self.stack[-1], _Object) else None

    def _byte(self, b: int) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif b == 0x5C:          # backslash
                self.escaped = True
            elif b == 0x22:          # closing quote
                self.in_string = False
                if self.in_key:
                    obj = self._top_object()
                    obj.keys.add(bytes(self.buf))
                    obj.expect, self.in_key = "colon", False
                return
            if self.in_key:
                self.buf.append(b)
            return
        c = chr(b)
        obj = self._top_object()
        if self.scalar and c not in "{}[],:\" \t\n\r":
            return
        self.scalar = False
        if c in " \t\n\r":
            return
        if obj is not None and obj.expect == "key" and c == '"':
            self.in_string = self.in_key = True
            self.buf = bytearray()
            return
        if obj is not None and obj.expect == "colon" and c == ":":
            obj.expect = "value"
            return
        if c == "," and obj is not None:
            obj.expect = "key"
            return
        if c in "}]":
            if self.stack:
                self.stack.pop()
            return
        if obj is not None and obj.expect == "value":
            obj.expect = "comma"
        if c == "{":
            self.stack.append(_Object())
        elif c == "[":
            self.stack.append("[")
        elif c == '"':
            self.in_string = True
        elif c != ",":
            self.scalar = True

    def completions(self) -> list:
        """The texts that, written next, would close a name the current object already holds."""
        obj = self._top_object()
        if obj is None or not obj.keys:
            return []
        if self.in_string:
            if not self.in_key or self.escaped:
                return []
            done = bytes(self.buf)
            return [k[len(done):] + b'"' for k in obj.keys if k.startswith(done)]
        if self.scalar and obj.expect != "comma":
            return []
        lead = {"key": (b'"', b' "'), "comma": (b',"', b', "')}.get(obj.expect, ())
        return [start + k + b'"' for k in obj.keys for start in lead]


class UniqueKeys:
    """Wraps a matcher (matcher.Matcher or llg.LlgMatcher) with the same verbs; see the module docstring."""

    def __init__(self, inner, vocab: KeyVocab):
        self._inner = inner
        self._vocab = vocab
        self._pieces: list = []      # per accepted token: its bytes
        self._scanner = KeyScanner()

    def __getattr__(self, name):     # jump_forward, accepted, vocab_size: the inner matcher's
        return getattr(self._inner, name)

    # read for every row of every step: no detour through a failed lookup and __getattr__
    error = property(lambda self: self._inner.error)
    allowed = property(lambda self: self._inner.allowed)

    def accept_token(self, token: int) -> bool:
        if not self._inner.accept_token(token):
            return False
        piece = self._vocab.pieces[token] if 0 <= token < len(self._vocab.pieces) else b""
        if self._inner.is_terminated():
            piece = b""              # the stop token adds no text
        self._pieces.append(piece)
        self._scanner.feed(piece)
        return True

    def accept_tokens(self, tokens) -> bool:
        """All or nothing, as Matcher.accept_tokens."""
        for i, t in enumerate(tokens):
            if not self.accept_token(t):
                self.rollback(i)
                return False
        return True

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        self._inner.rollback(n)
        del self._pieces[-n:]
        self._scanner = KeyScanner()
        self._scanner.feed(b"".join(self._pieces))

    def fill_bitmask(self, bitmask, row: int) -> None:
        self._inner.fill_bitmask(bitmask, row)
        self._ban_repeats(bitmask, row)

    def native_matcher(self) -> tuple:
        return self._inner.native_matcher()

    def finish_fill(self, bitmask, row: int) -> None:
        self._inner.finish_fill(bitmask, row)
        self._ban_repeats(bitmask, row)

    def _ban_repeats(self, bitmask, row: int) -> None:
        banned = {t for text in self._scanner.completions() for t in self._vocab.starting_with(text)}
        if not banned:
            return
        words = bitmask[row]
        saved = {}
        for t in banned:
            w, bit = divmod(t, 32)
            value = int(words[w])
            saved.setdefault(w, value)
            value &= ~(1 << bit) & 0xFFFFFFFF
            words[w] = value - (1 << 32) if value >= 1 << 31 else value
        if not bool(words.any()):    # every allowed token repeats a name: keep the grammar's mask
            for w, value in saved.items():
                words[w] = value

    def is_terminated(self) -> bool:
        return self._inner.is_terminated()

    def find_jump_forward_string(self) -> str:
        return self._inner.find_jump_forward_string()
