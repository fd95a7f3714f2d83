"""Grammar backend on XGrammar and llguidance: compile once per (kind, text), off the caller's thread.

`engine` is `xgrammar`, `llguidance` or `auto` (compile.choose_engine: llguidance for a JSON schema
that XGrammar would not enforce whole); `bounded_numbers` (the default) bounds JSON numbers in the
grammar (int64 integers, 17 significant digits), `--json-unbounded-numbers` turns it off.

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
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Optional

from radixlm.constrained.compile import (  # noqa: F401
    ENGINES,
    LLG_AFTER_TIMEOUT,
    MAX_GRAMMAR_CHARS,
    MAX_NESTING,
    Compiled,
    Options,
    check_size,
    compile_key,
)
from radixlm.constrained.compile_pool import SLOW_LANE_CHARS, CompilePool
from radixlm.constrained.errors import GrammarError  # noqa: F401  (re-exported for callers)
from radixlm.constrained.unique_keys import KeyVocab, UniqueKeys

if TYPE_CHECKING:
    from radixlm.constrained.matcher import Matcher

logger = logging.getLogger(__name__)

CACHE_BYTES = 256 << 20
BUILTIN_JSON = '"$$ANY$$"'
_BUILTIN_MARKERS = (BUILTIN_JSON, "$$ANY$$")


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


class GrammarBackend:
    """Owns the tokenizer info (built once from the model tokenizer), the compile pool and the cache.

    Thread safety: `submit` may be called from any thread; compiles run in the pool's processes.
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids=None, timeout_s: float = 5.0,
                 any_whitespace: bool = False, cache_bytes: int = CACHE_BYTES,
                 slow_lane_chars: int = SLOW_LANE_CHARS, engine: str = "xgrammar", bounded_numbers: bool = True,
                 json_indent: Optional[int] = None):
        import xgrammar as xgr

        if engine not in ENGINES:
            raise ValueError(f"grammar backend must be one of {', '.join(ENGINES)}, not {engine!r}")
        self._xgr = xgr
        self.engine = engine
        self.options = opts = Options(engine, any_whitespace, bounded_numbers, json_indent or None)
        self._json_tokens = self._json_token_words = None
        self._key_vocab = None
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids) if stop_token_ids else None
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=min(8, os.cpu_count() or 1),
                                            cache_enabled=False)
        self.llg_tokenizer = None
        if engine != "xgrammar":
            from radixlm.constrained.llg import make_tokenizer

            self.llg_tokenizer = make_tokenizer(tokenizer, vocab_size, self.stop_token_ids)
        hello = {"tokenizer_info": self.tokenizer_info.serialize_json(), "any_whitespace": any_whitespace,
                 "engine": engine, "bounded_numbers": bounded_numbers, "indent": json_indent or None}
        compiler, llg_tok = self.compiler, self.llg_tokenizer
        self.pool = CompilePool(lambda key: compile_key(xgr, compiler, key, opts, llg_tok), hello, timeout_s,
                                slow_lane_chars=slow_lane_chars, quick_kinds=(LLG_AFTER_TIMEOUT,))
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
        size = 256 if fut.exception() is not None else fut.result().size_bytes() + len(key[1])
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

    def after_timeout(self, key: tuple) -> Optional[Future]:
        """Under `auto`, a JSON schema whose XGrammar compile ran past its deadline: llguidance's compile of it
        (which builds masks lazily, so it is quick), or None where there is no second engine to ask."""
        if self.options.engine != "auto" or key[0] != "json":
            return None
        return self.submit((LLG_AFTER_TIMEOUT, key[1]))

    def compile(self, key: tuple, timeout: Optional[float] = None):
        """Blocking compile through the cache (tests, warm-up)."""
        return self.submit(key).result(timeout)

    def matcher(self, compiled: Compiled) -> "Matcher":
        from radixlm.constrained.matcher import Matcher

        json_kind = compiled.kind in ("json", "json_builtin")
        lines = bool(self.options.indent) and compiled.kind == "json" and compiled.engine == "xgrammar"
        allowed = self.json_tokens(lines) if json_kind and not self.options.any_whitespace else None
        words = self._json_token_words[lines] if allowed is not None else None
        if compiled.engine == "llguidance":
            from radixlm.constrained.llg import LlgMatcher, template

            def rebuild():   # the copies share the template's lexer, whose limits count what every copy built
                logger.warning("llguidance grammar built again, with more lexer fuel: a matcher ran past its limits")
                fresh = lambda: template(self.llg_tokenizer, compiled.source, raised=True)  # noqa: E731
                compiled.grammar = fresh()        # for the next requests
                return fresh().deep_copy()        # this one's replay spends its own

            matcher = LlgMatcher(compiled.grammar.deep_copy(), self.vocab_size, self.stop_token_ids,
                                 jump_forward=compiled.jump_forward, allowed=allowed, allowed_words=words,
                                 rebuild=rebuild if compiled.source is not None and self.llg_tokenizer else None)
        else:
            matcher = Matcher(self._xgr.GrammarMatcher(compiled.grammar), self.vocab_size,   # rollback is unlimited
                              jump_forward=compiled.jump_forward, allowed=allowed, allowed_words=words)
        return UniqueKeys(matcher, self.key_vocab()) if json_kind else matcher

    def key_vocab(self) -> KeyVocab:
        """The vocabulary's bytes sorted for unique_keys (built once)."""
        if self._key_vocab is None:
            self._key_vocab = KeyVocab(list(self.tokenizer_info.decoded_vocab[:self.vocab_size]))
        return self._key_vocab

    def json_tokens(self, lines: bool = False):
        """int32 [ceil(V / 32)] bitmask (xgrammar's layout) of the tokens with no raw control character (a byte
        below 0x20), plus the stop tokens: compact JSON holds none anywhere (JSON strings forbid them, and without
        any_whitespace no newline or tab separates values), but an engine's string rule may let them through
        (XGrammar's, for strings with length bounds: it keeps out only CR and LF), so a JSON grammar's masks are
        ANDed with this.  lines: newlines allowed too (an indented layout puts one before each value)."""
        if self._json_tokens is None:
            import numpy as np
            import torch

            words = (self.vocab_size + 31) // 32
            self._json_tokens, self._json_token_words = {}, {}
            for newline in (False, True):
                ok = np.zeros(words * 32, dtype=bool)                                        # [32 W]
                for i, piece in enumerate(self.tokenizer_info.decoded_vocab[:self.vocab_size]):
                    ok[i] = not any(b < 0x20 and not (newline and b == 0x0A) for b in piece)
                ok[list(self.stop_token_ids or ())] = True
                bits = ok.reshape(words, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)   # [W, 32]
                mask = torch.from_numpy(bits.sum(axis=1).astype(np.uint32).view(np.int32))         # [W]
                self._json_tokens[newline], self._json_token_words[newline] = mask, mask.tolist()
        return self._json_tokens[lines]

    def shutdown(self) -> None:
        self.pool.shutdown()
