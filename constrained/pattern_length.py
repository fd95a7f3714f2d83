"""A string's `pattern` read for what XGrammar would silently change: its anchors and its lengths.

XGrammar matches a `pattern` whole and, when `minLength`/`maxLength` come with it, drops the lengths.
`pattern_widths(p)` is the (shortest, longest) match in characters (longest None: unbounded), from
Python's own regex parser (ECMA-262 patterns as JSON Schema writes them parse the same way for the
constructs it knows; None when it cannot read one).  `merge_length_into_pattern` drops lengths that the
pattern implies, and folds them into an anchored pattern whose length varies through one repeated atom
(`^[0-9a-f]+$` with maxLength 8 -> `^[0-9a-f]{1,8}$`, `^[a-z][a-z0-9_]*$` with maxLength 64 ->
`^[a-z][a-z0-9_]{0,63}$`); anything else is left for the audit.  `misplaced_anchor(p)`
finds a `^` or `$` that is not at an end of the pattern: XGrammar ignores it, and written after a
JS-style `/` delimiter (which JSON Schema reads as a literal slash) it can never match.
"""

from __future__ import annotations

import importlib
import re
from typing import Optional

_sre_parse = getattr(re, "_parser", None) or importlib.import_module("sre_parse")   # 3.11+: re._parser

_UNBOUNDED = 1 << 30


# One JSON string character, raw: no control characters, quote or backslash.  Spelled as the ranges of
# well-formed UTF-8 (Unicode's table 3-7), one per distinct lead-byte constraint: XGrammar's regex
# compiles a range across them (U+0800-U+FFFF as one) to byte ranges that also admit overlong and
# surrogate encodings, which decode to U+FFFD and break the length bound.
STRING_CHAR = "(?:" + "|".join([
    r"[ !#-\[\]-\x7f]", r"[\u0080-\u07ff]", r"[\u0800-\u0fff]", r"[\u1000-\ucfff]", r"[\ud000-\ud7ff]",
    r"[\ue000-\uffff]", r"[\u{10000}-\u{3ffff}]", r"[\u{40000}-\u{fffff}]", r"[\u{100000}-\u{10ffff}]"]) + ")"


_BOUNDED_STRING = re.compile("\\^" + re.escape(STRING_CHAR) + r"\{(\d+),(\d*)\}\$")


def bounded_string_lengths(pattern: str):
    """(shortest, longest or None) of a pattern schema_normalize wrote for a string's lengths, else None."""
    m = _BOUNDED_STRING.fullmatch(pattern)
    return None if m is None else (int(m.group(1)), int(m.group(2)) if m.group(2) else None)


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


def _pieces(pattern: str):
    """(index, piece, inside a class) for each escape (two characters) or other character of a pattern; a `]`
    right after a class's `[` or `[^` is a member, and the closing `]` counts as inside."""
    in_class, first, i = False, -1, 0
    while i < len(pattern):
        c = pattern[i]
        piece = pattern[i:i + 2] if c == "\\" else c
        inside = in_class
        if not in_class and c == "[":
            in_class, first = True, i + 1 + (pattern[i + 1:i + 2] == "^")
        elif in_class and c == "]" and i != first:
            in_class = False
        yield i, piece, inside
        i += len(piece)


def regular_only(pattern: str):
    """What in the pattern no regular grammar can hold ('a backreference', 'a lookaround'), else None: the
    grammar engines refuse it ("Backreference is not supported")."""
    for i, piece, inside in _pieces(pattern):
        if inside:
            continue
        if piece[:1] == "\\" and (piece[1:] in tuple("123456789") or pattern.startswith("k<", i + 1)):
            return "a backreference"
        if pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            return "a lookaround"
    return None


def optional_groups_counted(pattern: str) -> str:
    """`(...)?` as `(...){0,1}`: XGrammar 0.2's JSON-string regex reads a `?` after a group wrongly
    (`^[0-9](x[a-z]+)?$` accepted "1ab"); the counted form means the same and compiles right."""
    out, skip = [], -1
    for i, piece, inside in _pieces(pattern):
        if i == skip:
            continue
        if not inside and piece == ")" and pattern[i + 1:i + 2] == "?" and pattern[i + 2:i + 3] != "?":
            out.append("){0,1}")
            skip = i + 1
        else:
            out.append(piece)
    return "".join(out)


def class_members_escaped(pattern: str) -> str:
    """A pattern for llguidance, which reads classes as Rust's regex does: inside a class, `[` opens a nested
    class and `&&`/`~~` are set operations, where JSON Schema's ECMA-262 (and Python's `re`) read plain
    characters.  Each `[`, `&` and `~` inside a class is escaped (`^[[a-z]*-?]$` matched "--" there)."""
    return "".join("\\" + piece if inside and piece in ("[", "&", "~") else piece
                   for _, piece, inside in _pieces(pattern))


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
    atoms = _anchored_atoms(pattern)
    if atoms is None:
        return
    widths = [pattern_widths(a) for a, _, _ in atoms]
    if any(w is None or w[0] != w[1] for w in widths):
        return
    variable = [i for i, (_, qlo, qhi) in enumerate(atoms) if qlo != qhi]
    if len(variable) != 1 or widths[variable[0]][0] == 0:
        return
    i = variable[0]
    fixed = sum(w[0] * qlo for j, (w, (_, qlo, _)) in enumerate(zip(widths, atoms)) if j != i)
    step, (atom, qlo, qhi) = widths[i][0], atoms[i]
    new_lo = max(qlo, -(-((low or 0) - fixed) // step))
    new_hi = qhi if high is None else ((high - fixed) // step if qhi is None else min(qhi, (high - fixed) // step))
    if new_hi is not None and new_lo > new_hi:
        return                          # cannot all hold: the audit says so
    out.pop("minLength", None)
    out.pop("maxLength", None)
    parts = [a if (n, m) == (1, 1) else f"{a}{{{n}}}" for a, n, m in atoms]
    parts[i] = f"{atom}{{{new_lo},{'' if new_hi is None else new_hi}}}"
    out["pattern"] = "^" + "".join(parts) + "$"


_LITERAL_ESCAPE = re.compile(r"\\([^A-Za-z0-9])")


def leading_characters(pattern: str) -> list:
    """For a pattern anchored at its start: per leading position, the characters every match has there (a
    literal, or an escaped one), or an empty set for another one-character atom (not known); a final None
    where the atoms stop being one character wide.  [] for a pattern this does not read."""
    if not pattern.startswith("^"):
        return []
    whole = pattern if pattern.endswith("$") and not pattern.endswith("\\$") else pattern + "$"
    out = []
    for atom, low, high in _anchored_atoms(whole) or []:
        if (low, high) != (1, 1) or atom.startswith("("):
            out.append(None)
            break
        m = _LITERAL_ESCAPE.fullmatch(atom)
        out.append({m.group(1)} if m else {atom} if len(atom) == 1 and atom != "." else set())
    return out


_QUANTIFIER = re.compile(r"(\*|\+|\?|\{(\d+)\}|\{(\d+),(\d*)\})(\??)")


def _anchored_atoms(pattern: str):
    """`^...$` (or `(^...$)`) as [(atom, least, most or None)]: each atom a character, escape, class or group
    with its quantifier; None where the pattern is not one anchored sequence (an alternative at the top, an
    anchor or a lazy quantifier inside, a construct this does not read)."""
    if pattern.startswith("(^") and pattern.endswith("$)") and _group_end(pattern, 0) == len(pattern) - 1:
        pattern = pattern[1:-1]
    if not (pattern.startswith("^") and pattern.endswith("$")) or pattern.endswith("\\$") or misplaced_anchor(pattern):
        return None
    body, atoms, i = pattern[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c in "|)*+?{^$":
            return None
        if c == "\\":
            m = re.compile(r"\\(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[^ux0-9bB])").match(body, i)
            if m is None:
                return None
            end = m.end()
        elif c == "[":
            end = _class_end(body, i)
        elif c == "(":
            if body.startswith(("(?=", "(?!", "(?<"), i):
                return None
            end = _group_end(body, i)
            end = None if end is None else end + 1
        else:
            end = i + 1
        if end is None:
            return None
        atom, i = body[i:end], end
        m = _QUANTIFIER.match(body, i)
        if m is None:
            atoms.append((atom, 1, 1))
            continue
        if m.group(5):
            return None
        q = m.group(1)
        lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(q, (None, None))
        if lo is None:
            lo = int(m.group(2) or m.group(3))
            hi = lo if m.group(2) else (int(m.group(4)) if m.group(4) else None)
        atoms.append((atom, lo, hi))
        i = m.end()
    return atoms


def _class_end(text: str, i: int):
    """The index after the class that opens at text[i]."""
    j = i + 1
    if text[j:j + 1] == "^":
        j += 1
    if text[j:j + 1] == "]":
        j += 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == "]":
            return j + 1
        j += 1
    return None


def _group_end(text: str, i: int):
    """The index of the `)` that closes the group opening at text[i]."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _class_end(text, j)
            if j is None:
                return None
            continue
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return j
        j += 1
    return None
