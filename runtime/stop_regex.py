"""stop_regex: SGLang's regex stop condition (plain Python, no torch).

Semantics (SGLang's): after each new output token the scheduler runs Python's `re.search` over the
output text; the request finishes at the first token after which a pattern matches, with
finish_reason {"type": "stop", "matched": <pattern>}.  The text ends where the first match starts
(it is trimmed like a stop string), or where it ends with no_stop_trim.

`max_match_len(pattern)` is SGLang's bound on how many characters a match can span (`re`'s parse
tree: literals, classes and `.` count 1, repeats multiply, unbounded repeats and lookarounds count
as MAX_LEN).  It bounds both the scheduler's search window and the detokenizer's hold-back: a match
that the next tokens complete starts within the last max_match_len - 1 characters of the text.
"""

import functools
import re

try:
    import re._parser as _sre_parse
except ImportError:  # Python < 3.11
    import sre_parse as _sre_parse

MAX_LEN = 1 << 30
MAX_STOP_REGEX_COUNT = 32
MAX_STOP_REGEX_BYTES = 256
_ZERO_WIDTH = {_sre_parse.AT}
_ONE_CHAR = {_sre_parse.LITERAL, _sre_parse.NOT_LITERAL, _sre_parse.IN, _sre_parse.ANY}


def check_stop_regex(patterns) -> None:
    """ValueError unless patterns is a list of at most 32 valid patterns of at most 256 bytes each."""
    if not isinstance(patterns, (list, tuple)):
        raise ValueError(f"stop_regex must be a string or a list of strings, got {patterns!r}")
    if len(patterns) > MAX_STOP_REGEX_COUNT:
        raise ValueError(f"at most {MAX_STOP_REGEX_COUNT} stop_regex patterns are allowed, got {len(patterns)}")
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise ValueError(f"stop_regex entries must be non-empty strings, got {p!r}")
        if len(p.encode()) > MAX_STOP_REGEX_BYTES:
            raise ValueError(f"stop_regex {p[:40]!r}... is {len(p.encode())} bytes, over the "
                             f"{MAX_STOP_REGEX_BYTES}-byte limit")
        try:
            _compile(p)
        except (re.error, RecursionError) as exc:
            raise ValueError(f"stop_regex {p!r} is not a valid Python regular expression: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str):
    return re.compile(pattern)


@functools.lru_cache(maxsize=1024)
def max_match_len(pattern: str) -> int:
    """Most characters one match of pattern can span (MAX_LEN when unbounded)."""
    return min(_span(_sre_parse.parse(pattern)), MAX_LEN)


def _span(sub) -> int:
    total = 0
    for op, value in sub:
        if op in _ONE_CHAR:
            total += 1
        elif op in _ZERO_WIDTH:
            continue
        elif op == _sre_parse.SUBPATTERN:
            total += _span(value[-1])
        elif op == _sre_parse.BRANCH:
            total += max(_span(b) for b in value[1])
        elif op in (_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT, getattr(_sre_parse, "POSSESSIVE_REPEAT", None)):
            lo, hi, inner = value
            total += MAX_LEN if hi == _sre_parse.MAXREPEAT else hi * _span(inner)
        else:  # lookarounds, backreferences, conditionals, atomic groups: no bound
            total += MAX_LEN
        total = min(total, MAX_LEN)
    return total


def hold_back(patterns) -> int:
    """Characters at the end of a streamed text that a future match could still start in."""
    return max((max_match_len(p) - 1 for p in patterns or ()), default=0)


def first_match(patterns, text: str, pos: int = 0):
    """(pattern, re.Match) of the leftmost-starting match at or after pos over all patterns (ties: the
    first pattern), or None."""
    best = None
    for p in patterns or ():
        m = _compile(p).search(text, pos)
        if m is not None and (best is None or m.start() < best[1].start()):
            best = (p, m)
    return best
