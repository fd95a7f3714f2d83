"""Which rules of a grammar can finish: a static check that keeps jump-forward from running forever.

XGrammar's `find_jump_forward_string()` extends the forced text for as long as exactly one
continuation exists.  A rule with no finite derivation (`root ::= "ab" root`, or a JSON schema whose
object requires a property of its own type) forces text without end, and the call never returns
while it allocates.  The forced text from a state is the common prefix of that state's completions,
so it is finite whenever one completion is: if every rule the matcher can reach is *productive*
(derives at least one finite string), jump-forward terminates.

`analyze(grammar_text)` reads the grammar as XGrammar prints it (`str(xgr.Grammar)`) and returns
the reachable rules that are not productive.  Plain Python, no xgrammar import.  Constructs it does
not model (lookaheads, `Regex(...)`, `TagDispatch(...)`) count as productive atoms; text it cannot
parse raises `GrammarSyntaxUnknown`, and the caller then treats jump-forward as unsafe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE_HEAD = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*) ::= ", re.M)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")   # schema $defs names keep their '-' and '.'

_REPEAT = re.compile(r"\{\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?\}")


class GrammarSyntaxUnknown(ValueError):
    """The printed grammar has a construct this reader does not know."""


@dataclass(frozen=True)
class Analysis:
    root_productive: bool
    unproductive: tuple      # reachable rules (names) without a finite derivation


def _names_outside_strings(text: str) -> list:
    """Identifiers in text that are not inside a string literal (candidate rule references)."""
    return _IDENT.findall(re.sub(r'"(?:[^"\\]|\\.)*"', " ", text))


# AST: ("atom",) | ("opaque", [names]) | ("ref", name) | ("seq", [nodes]) | ("alt", [nodes]) | ("rep", node, min_count)
class _Reader:
    def __init__(self, text: str):
        self.s, self.i = text, 0

    def _skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def _peek(self) -> str:
        self._skip_ws()
        return self.s[self.i] if self.i < len(self.s) else ""

    def _scan_quoted(self, close: str) -> None:
        self.i += 1
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 2 if c == "\\" else 1
            if c == close:
                return
        raise GrammarSyntaxUnknown(f"unterminated {close!r}")

    def _skip_balanced(self) -> None:
        """From an opening '(' past its matching ')', over strings and classes."""
        depth = 0
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self._scan_quoted('"')
                continue
            if c == "[":
                self._scan_quoted("]")
                continue
            self.i += 1
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return
        raise GrammarSyntaxUnknown("unbalanced parentheses")

    def alternation(self):
        alts = [self.sequence()]
        while self._peek() == "|":
            self.i += 1
            alts.append(self.sequence())
        return alts[0] if len(alts) == 1 else ("alt", alts)

    def sequence(self):
        items = []
        while self._peek() not in ("", "|", ")"):
            items.append(self.postfix(self.atom()))
        return ("seq", items)

    def atom(self):
        c = self._peek()
        if c == '"':
            self._scan_quoted('"')
            return ("atom",)
        if c == "[":
            self._scan_quoted("]")
            return ("atom",)
        if c == "(":
            if self.s.startswith("(=", self.i):       # lookahead: consumes nothing
                self._skip_balanced()
                return ("seq", [])
            self.i += 1
            node = self.alternation()
            if self._peek() != ")":
                raise GrammarSyntaxUnknown(f"expected ')' at {self.i}")
            self.i += 1
            return node
        m = _IDENT.match(self.s, self.i)
        if m:
            self.i = m.end()
            if self.i < len(self.s) and self.s[self.i] == "(":   # Regex(...), TagDispatch(...)
                start = self.i
                self._skip_balanced()
                return ("opaque", _names_outside_strings(self.s[start:self.i]))
            return ("ref", m.group())
        raise GrammarSyntaxUnknown(f"unexpected {c!r} at {self.i}")

    def postfix(self, node):
        while True:
            c = self.s[self.i] if self.i < len(self.s) else ""
            if c in ("*", "?"):
                self.i += 1
                node = ("rep", node, 0)
            elif c == "+":
                self.i += 1
                node = ("rep", node, 1)
            elif c == "{":
                m = _REPEAT.match(self.s, self.i)
                if not m:
                    raise GrammarSyntaxUnknown(f"bad repetition at {self.i}")
                self.i = m.end()
                node = ("rep", node, max(int(m.group(1)), 0))
            else:
                return node


def parse_rules(text: str) -> tuple[dict, str]:
    """{rule name: AST} and the root rule's name (the one named 'root', else the first)."""
    heads = list(_RULE_HEAD.finditer(text))
    if not heads:
        raise GrammarSyntaxUnknown("no rules")
    rules = {}
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        reader = _Reader(text[m.end():end])
        rules[m.group(1)] = reader.alternation()
        if reader._peek():
            raise GrammarSyntaxUnknown(f"trailing text in rule {m.group(1)!r}")
    return rules, "root" if "root" in rules else heads[0].group(1)


def _productive(node, known: set) -> bool:
    kind = node[0]
    if kind in ("atom", "opaque"):
        return True
    if kind == "ref":
        return node[1] in known
    if kind == "seq":
        return all(_productive(n, known) for n in node[1])
    if kind == "alt":
        return any(_productive(n, known) for n in node[1])
    return node[2] == 0 or _productive(node[1], known)


def _refs(node, out: set, rules: dict) -> set:
    if node[0] == "ref":
        out.add(node[1])
    elif node[0] == "opaque":   # a dispatch enters the rules it names
        out.update(n for n in node[1] if n in rules)
    elif node[0] in ("seq", "alt"):
        for n in node[1]:
            _refs(n, out, rules)
    elif node[0] == "rep":
        _refs(node[1], out, rules)
    return out


def analyze(text: str) -> Analysis:
    rules, root = parse_rules(text)
    productive: set = set()
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name not in productive and _productive(body, productive):
                productive.add(name)
                changed = True
    reachable, todo = {root}, [root]
    while todo:
        for ref in _refs(rules.get(todo.pop(), ("seq", [])), set(), rules):
            if ref not in reachable:
                reachable.add(ref)
                todo.append(ref)
    unknown = reachable - set(rules)
    if unknown:
        raise GrammarSyntaxUnknown(f"undefined rule(s) {sorted(unknown)}")
    dead = tuple(sorted(reachable - productive))
    return Analysis(root in productive, dead)
