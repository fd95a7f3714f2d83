"""Grammar backend on XGrammar: compile once per (kind, text), off the caller's thread.

`GrammarBackend.submit(key)` returns a `concurrent.futures.Future` of a `CompiledGrammar`; the
compile runs on a small thread pool and the future is cached under its key, so a repeated schema
costs nothing (a failed compile is cached too: the same text fails the same way).  The caller
enforces the wall-clock limit (see `queue.GrammarQueue`): a compile cannot be interrupted, so a
timed-out one finishes in the background and its result stays in the cache.

Keys: `grammar_key(params)` -> ("json", schema) | ("json_builtin", "") | ("regex", r) | ("ebnf", g) |
("structural_tag", tag JSON).
The builtin JSON grammar (OpenAI `json_object`) is asked for with the json_schema marker
`BUILTIN_JSON` (a JSON string, so it passes sampling-param validation; no schema is a bare string).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.constrained.grammar_check import GrammarSyntaxUnknown, analyze
from radixlm.constrained.schema_normalize import normalize_schema_text

logger = logging.getLogger(__name__)

BUILTIN_JSON = '"$$ANY$$"'
_BUILTIN_MARKERS = (BUILTIN_JSON, "$$ANY$$")
_CPP_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")


class GrammarError(ValueError):
    """A grammar the backend refused; str() is a message for the client (HTTP 400)."""


def grammar_key(params) -> Optional[tuple]:
    """(kind, text) of a request's constraint, or None for a free request."""
    if params.json_schema is not None:
        if params.json_schema.strip() in _BUILTIN_MARKERS:
            return ("json_builtin", "")
        return ("json", params.json_schema)
    if params.regex is not None:
        return ("regex", params.regex)
    if params.ebnf is not None:
        return ("ebnf", params.ebnf)
    if getattr(params, "structural_tag", None) is not None:
        return ("structural_tag", params.structural_tag)
    return None


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


class GrammarBackend:
    """Owns the XGrammar compiler (built once from the model tokenizer) and the compile cache.

    Thread safety: `submit` is called from one thread (the scheduler); compiles run on the pool.
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids=None, max_workers: int = 4,
                 any_whitespace: bool = False):
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids) if stop_token_ids else None
        self.any_whitespace = any_whitespace
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=min(8, os.cpu_count() or 1))
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grammar")
        self.cache: dict[tuple, Future] = {}
        self._lock = threading.Lock()

    def submit(self, key: tuple) -> Future:
        """Future of the compiled grammar for key; raises GrammarError (in the future) when invalid."""
        with self._lock:
            fut = self.cache.get(key)
            if fut is None:
                fut = self.pool.submit(self._compile, key)
                self.cache[key] = fut
            return fut

    def compile(self, key: tuple, timeout: Optional[float] = None):
        """Blocking compile through the cache (tests, warm-up)."""
        return self.submit(key).result(timeout)

    def _grammar(self, kind: str, text: str):
        Grammar = self._xgr.Grammar
        if kind == "json":
            return Grammar.from_json_schema(normalize_schema_text(text), any_whitespace=self.any_whitespace)
        if kind == "json_builtin":
            return Grammar.builtin_json_grammar()
        if kind == "regex":
            return Grammar.from_regex(text)
        if kind == "ebnf":
            return Grammar.from_ebnf(text)
        if kind == "structural_tag":
            return Grammar.from_structural_tag(text)
        raise GrammarError(f"unknown grammar kind {kind!r}")

    def _compile(self, key: tuple) -> Compiled:
        kind, text = key
        try:
            grammar = self._grammar(kind, text)
        except GrammarError:
            raise
        except Exception as exc:
            raise GrammarError(f"invalid {_WHAT.get(kind, kind)}: {backend_message(exc)}") from None
        jump_forward = check_finite(grammar, kind)
        try:
            return Compiled(self.compiler.compile_grammar(grammar), jump_forward)
        except Exception as exc:
            raise GrammarError(f"invalid {_WHAT.get(kind, kind)}: {backend_message(exc)}") from None

    def matcher(self, compiled: Compiled) -> "Matcher":
        from radixlm.constrained.matcher import Matcher

        return Matcher(self._xgr.GrammarMatcher(compiled.grammar), self.vocab_size,   # rollback is unlimited
                       jump_forward=compiled.jump_forward)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
