"""A string's `pattern` read for what XGrammar would silently change: its anchors and its lengths.

XGrammar matches a `pattern` whole and, when `minLength`/`maxLength` come with it, drops the lengths.
`pattern_widths(p)` is the (shortest, longest) match in characters (longest None: unbounded), from
Python's own regex parser (ECMA-262 patterns as JSON Schema writes them parse the same way for the
constructs it knows; None when it cannot read one).  `merge_length_into_pattern` drops lengths that the
pattern implies, and folds them into a pattern that is one repeated character class (`^[0-9a-f]+$`
with maxLength 8 -> `^[0-9a-f]{1,8}$`); anything else is left for the audit.  `misplaced_anchor(p)`
finds a `^` or `$` that is not at an end of the pattern: XGrammar ignores it, and written after a
JS-style `/` delimiter (which JSON Schema reads as a literal slash) it can never match.
"""

from __future__ import annotations

import importlib
import re
from typing import Optional

_sre_parse = getattr(re, "_parser", None) or importlib.import_module("sre_parse")   # 3.11+: re._parser

_UNBOUNDED = 1 << 30
_ONE_CLASS = re.compile(r"^\^?((?:\[(?:\\.|[^\]\\])+\])|\\[dwsDWS]|\.)(\+|\*|\{(\d+)(?:,(\d*))?\})?\$?$")


def pattern_widths(pattern: str) -> Optional[tuple[int, Optional[int]]]:
    try:
        lo, hi = _sre_parse.parse(pattern).getwidth()
    except Exception:
        return None
    return lo, (None if hi >= _UNBOUNDED else hi)


def misplaced_anchor(pattern: str) -> Optional[str]:
    """'^' or '$' when one stands inside the pattern (outside a class, unescaped), else None."""
    depth_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if depth_class:
            depth_class = c != "]"
        elif c == "[":
            depth_class = True
        elif c == "^" and pattern[:i].strip("(|") != "" and pattern[i - 1] not in "(|":
            return "^"
        elif c == "$" and i != len(pattern) - 1 and pattern[i + 1] not in ")|":
            return "$"
        i += 1
    return None


def optional_groups_counted(pattern: str) -> str:
    """`(...)?` as `(...){0,1}`: XGrammar 0.2's JSON-string regex reads a `?` after a group wrongly
    (`^[0-9](x[a-z]+)?$` accepted "1ab"); the counted form means the same and compiles right."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == ")" and pattern[i + 1:i + 2] == "?" and pattern[i + 2:i + 3] != "?":
            out.append("){0,1}")
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


_BACKSLASH = re.compile(r"\\(?:\\|x5[cC]|u005[cC])")     # a literal backslash: \\, \x5c, \u005c
_QUOTE = re.compile(r'"|\\(?:"|x22|u0022)')              # a literal quote: ", \", \x22, \u0022


ESCAPED_BACKSLASH, ESCAPED_QUOTE = "(?:\\\\\\\\)", '(?:\\\\")'   # a JSON escape, as a pattern of the JSON text


def json_escapes_spelled(pattern: str) -> str:
    r"""A pattern for XGrammar, which matches it against the JSON text between the quotes one character for one:
    a literal backslash or quote outside a class (JSON writes them as two characters) becomes its escape,
    `(?:\\\\)` and `(?:\\")`.  XGrammar wrote them raw, so the answer was not JSON (JSONSchemaBench
    o36798's `^\\d+/...` answered `"\d/..."`).  Classes are left alone: XGrammar never writes a backslash or a
    quote from one (a restriction)."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if in_class:
            if c == "\\":
                out.append(pattern[i:i + 2])
                i += 2
                continue
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        m = _BACKSLASH.match(pattern, i) or _QUOTE.match(pattern, i)
        if m:
            out.append(ESCAPED_BACKSLASH if m.re is _BACKSLASH else ESCAPED_QUOTE)
            i = m.end()
            continue
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
            out.append(pattern[i:i + 2] if pattern[i + 1:i + 2] == "]" else c)   # a leading ] is literal
            i += 2 if pattern[i + 1:i + 2] == "]" else 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def is_js_literal(pattern: str) -> bool:
    """`/.../flags`: a JavaScript regex literal, delimiters included."""
    return re.fullmatch(r"/.*/[dgimsuvy]*", pattern, re.S) is not None and len(pattern) >= 2


def merge_length_into_pattern(out: dict) -> None:
    pattern, low, high = out.get("pattern"), out.get("minLength"), out.get("maxLength")
    if not isinstance(pattern, str) or (low is None and high is None) or misplaced_anchor(pattern):
        return
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in (low, high)):
        return
    widths = pattern_widths(pattern)
    if widths is None:
        return
    plo, phi = widths
    if plo >= (low or 0) and (high is None or (phi is not None and phi <= high)):
        out.pop("minLength", None)      # every match of the pattern already has a length in bounds
        out.pop("maxLength", None)
        return
    m = _ONE_CLASS.match(pattern)
    if not m or not (pattern.startswith("^") and pattern.endswith("$")):
        return
    cls, rep = m.group(1), m.group(2)
    if rep is None:
        rlo, rhi = 1, 1
    elif rep == "+":
        rlo, rhi = 1, None
    elif rep == "*":
        rlo, rhi = 0, None
    else:
        rlo = int(m.group(3))
        rhi = rlo if "," not in rep else (int(m.group(4)) if m.group(4) else None)
    new_lo = max(rlo, low or 0)
    new_hi = rhi if high is None else (high if rhi is None else min(rhi, high))
    if new_hi is not None and new_lo > new_hi:
        return                          # cannot all hold: the audit says so
    out.pop("minLength", None)
    out.pop("maxLength", None)
    out["pattern"] = f"^{cls}{{{new_lo},{'' if new_hi is None else new_hi}}}$"
