"""Compiling one (kind, text) key with XGrammar: size and nesting bounds first, then the grammar, then
whether it admits a finite output (and so whether jump-forward may run on it).  Runs in the caller's
thread pool or in the compile worker process."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from radixlm.constrained.errors import GrammarError
from radixlm.constrained.grammar_check import GrammarSyntaxUnknown, analyze
from radixlm.constrained.schema_normalize import normalize_schema_text

logger = logging.getLogger(__name__)

MAX_GRAMMAR_CHARS = 1 << 20
MAX_NESTING = 128
_CPP_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")


def backend_message(exc: BaseException) -> str:
    """XGrammar's own message without its '[time] file.cc:line:' prefix."""
    text = str(exc).strip() or type(exc).__name__
    return _CPP_PREFIX.sub("", text).strip()


@dataclass(frozen=True)
class Compiled:
    """A compiled grammar and whether jump-forward provably terminates on it (see grammar_check)."""

    grammar: Any              # xgrammar.CompiledGrammar
    jump_forward: bool


_WHAT = {"json": "json_schema", "json_builtin": "json_schema", "regex": "regex", "ebnf": "ebnf"}


def check_finite(grammar, kind: str) -> bool:
    """Raises GrammarError when the grammar admits no finite output at all; returns whether every
    reachable rule can finish (only then may jump-forward run: otherwise it never returns)."""
    try:
        result = analyze(str(grammar))
    except GrammarSyntaxUnknown as exc:
        logger.debug("grammar check skipped (%s): jump-forward off for this grammar", exc)
        return False
    if not result.root_productive:
        rules = ", ".join(result.unproductive[:4])
        raise GrammarError(f"invalid {_WHAT.get(kind, kind)}: it admits no finite output (rules {rules} only "
                           f"expand into themselves: a recursion without a base case, such as a $ref "
                           f"cycle through required properties)")
    return not result.unproductive


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON or grammar text, outside string literals (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[(":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "}])":
            depth -= 1
    return deepest


def check_size(kind: str, text: str) -> None:
    what = _WHAT.get(kind, kind)
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"invalid {what}: {len(text)} characters is more than the {MAX_GRAMMAR_CHARS} allowed")
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        raise GrammarError(f"invalid {what}: nested {depth} levels deep, more than the {MAX_NESTING} allowed")


def build_grammar(xgr, kind: str, text: str, any_whitespace: bool):
    Grammar = xgr.Grammar
    if kind == "json":
        return Grammar.from_json_schema(normalize_schema_text(text), any_whitespace=any_whitespace)
    if kind == "json_builtin":
        return Grammar.builtin_json_grammar()
    if kind == "regex":
        return Grammar.from_regex(text)
    if kind == "ebnf":
        return Grammar.from_ebnf(text)
    if kind == "structural_tag":
        return Grammar.from_structural_tag(text)
    raise GrammarError(f"unknown grammar kind {kind!r}")


def compile_key(xgr, compiler, key: tuple, any_whitespace: bool) -> Compiled:
    """Compile (kind, text) with an xgrammar.GrammarCompiler; GrammarError names what is wrong."""
    kind, text = key
    check_size(kind, text)
    try:
        grammar = build_grammar(xgr, kind, text, any_whitespace)
    except GrammarError:
        raise
    except Exception as exc:
        raise GrammarError(f"invalid {_WHAT.get(kind, kind)}: {backend_message(exc)}") from None
    jump_forward = check_finite(grammar, kind)
    try:
        return Compiled(compiler.compile_grammar(grammar), jump_forward)
    except Exception as exc:
        raise GrammarError(f"invalid {_WHAT.get(kind, kind)}: {backend_message(exc)}") from None
