"""Grammar backend on XGrammar: compile once per (kind, text), off the caller's thread.

`GrammarBackend.submit(key)` returns a `concurrent.futures.Future` of a `Compiled`; the compile runs
off the caller's thread (`compile_pool`: a fast lane for short grammars, a slow lane for long ones
whose compile is first tried in a worker process that is killed at `timeout_s`) and the future is cached under its key, so a repeated schema costs
nothing (a failed or timed-out compile is cached too: the same text fails the same way).  The cache
holds at most `cache_bytes` of compiled grammars, least recently used dropped first.  Grammar text
longer than MAX_GRAMMAR_CHARS or nested deeper than MAX_NESTING is refused before compiling.

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
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.constrained.compile_pool import SLOW_LANE_CHARS, CompilePool
from radixlm.constrained.grammar_check import GrammarSyntaxUnknown, analyze
from radixlm.constrained.schema_normalize import normalize_schema_text

logger = logging.getLogger(__name__)

MAX_GRAMMAR_CHARS = 1 << 20
MAX_NESTING = 128
CACHE_BYTES = 256 << 20
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


class GrammarBackend:
    """Owns the tokenizer info (built once from the model tokenizer), the compile pool and the cache.

    Thread safety: `submit` may be called from any thread; compiles run in the pool's processes.
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids=None, timeout_s: float = 5.0,
                 any_whitespace: bool = False, cache_bytes: int = CACHE_BYTES,
                 slow_lane_chars: int = SLOW_LANE_CHARS):
        import xgrammar as xgr


        self._xgr = xgr
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids) if stop_token_ids else None
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=min(8, os.cpu_count() or 1),
                                            cache_enabled=False)
        hello = {"tokenizer_info": self.tokenizer_info.serialize_json(), "any_whitespace": any_whitespace}
        compiler = self.compiler
        self.pool = CompilePool(lambda key: compile_key(xgr, compiler, key, any_whitespace), hello, timeout_s,
                                slow_lane_chars=slow_lane_chars)
        weakref.finalize(self, self.pool.shutdown)      # a dropped backend takes its worker process along
        self.cache: OrderedDict[tuple, Future] = OrderedDict()
        self.sizes: dict[tuple, int] = {}
        self.cache_bytes, self.cached_bytes = cache_bytes, 0
        self._lock = threading.Lock()

    def submit(self, key: tuple) -> Future:
        """Future of the compiled grammar for key; raises GrammarError (in the future) when invalid."""
        with self._lock:
            fut = self.cache.get(key)
            if fut is not None:
                self.cache.move_to_end(key)
                return fut
            fut = self._refused(key) or self.pool.submit(key)
            self.cache[key] = fut
        fut.add_done_callback(lambda f, key=key: self._account(key, f))
        return fut

    @staticmethod
    def _refused(key: tuple) -> Optional[Future]:
        """A failed future for a grammar too large or too deep to compile at all, else None."""
        try:
            check_size(*key)
        except GrammarError as exc:
            fut: Future = Future()
            fut.set_exception(exc)
            return fut
        return None

    def _account(self, key: tuple, fut: Future) -> None:
        size = 256 if fut.exception() is not None else fut.result().grammar.memory_size_bytes + len(key[1])
        with self._lock:
            if self.cache.get(key) is not fut:
                return
            self.sizes[key] = size
            self.cached_bytes += size
            for old in [k for k in self.cache if k in self.sizes]:
                if self.cached_bytes <= self.cache_bytes or old == key:
                    break
                del self.cache[old]
                self.cached_bytes -= self.sizes.pop(old)

    def compile(self, key: tuple, timeout: Optional[float] = None):
        """Blocking compile through the cache (tests, warm-up)."""
        return self.submit(key).result(timeout)

    def matcher(self, compiled: Compiled) -> "Matcher":
        from radixlm.constrained.matcher import Matcher

        return Matcher(self._xgr.GrammarMatcher(compiled.grammar), self.vocab_size,   # rollback is unlimited
                       jump_forward=compiled.jump_forward)

    def shutdown(self) -> None:
        self.pool.shutdown()
