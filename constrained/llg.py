"""llguidance as the second grammar engine: grammar text, compile, and a matcher with XGrammar's verbs.

llguidance enforces JSON Schema more completely than XGrammar (patterns with lengths, unanchored
patterns, overlapping oneOf when provably anyOf, allOf intersections) and refuses what it does not
implement (`uniqueItems`, `not`, ...) instead of dropping it.  It compiles JSON schemas and regexes;
EBNF and structural tags are XGrammar's formats and stay there.  `LlgMatcher` keeps the contract of
`matcher.Matcher`: the stop tokens are handled here (accepted only where the grammar may end, then
`is_terminated`), so the same scheduler code drives both engines.  The bitmask layout is the same:
int32 [B, ceil(V / 32)], bit set = allowed.
"""

from __future__ import annotations

import json
import re

from radixlm.constrained.errors import GrammarError
from radixlm.constrained.matcher import Matcher
from radixlm.constrained.one_of import VALUE_KEYWORDS
from radixlm.constrained.pattern_length import class_members_escaped
from radixlm.constrained.schema_normalize import finished, load_schema, marked_schema

KINDS = ("json", "json_builtin", "regex")


def grammar_text(kind: str, text: str, any_whitespace: bool, bounded_numbers: bool) -> str:
    import llguidance as llg

    if kind == "regex":
        return llg.LLMatcher.grammar_from_regex(class_members_escaped(text))
    parsed = load_schema('{}' if kind == "json_builtin" else text)
    schema = text
    if parsed is not None:
        marked = marked_schema(parsed, "llguidance", bounded_numbers)
        overlap = _overlapping_one_of(marked)
        if overlap is not None:
            raise GrammarError(f"invalid json_schema (llguidance): keyword 'oneOf' at {overlap.pointer} is not "
                               f"enforced: its branches may overlap (an output could validate two of them)")
        schema = json.dumps(_known_formats_only(finished(marked, "llguidance")))
    options = ({"whitespace_flexible": True} if any_whitespace else
               {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
    try:
        return llg.LLMatcher.grammar_from_json_schema(schema, overrides=options)
    except ValueError as exc:
        raise GrammarError(f"invalid json_schema: {exc}") from None


# the `format` values llguidance enforces (llguidance 1.9); it refuses a schema with any other
LLG_FORMATS = frozenset(("date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"))


def _known_formats_only(node):
    """The schema without the `format`s llguidance does not know (`regex`, `uri-reference`, `int32`...): by
    default a format only annotates (JSON Schema 2019-09 on; validators assert none unless asked), and XGrammar
    passes such a format over too, so llguidance takes the schema instead of refusing it."""
    if isinstance(node, list):
        return [_known_formats_only(v) for v in node]
    if not isinstance(node, dict):
        return node
    return {k: (v if k in VALUE_KEYWORDS else _known_formats_only(v)) for k, v in node.items()
            if not (k == "format" and isinstance(v, str) and v not in LLG_FORMATS)}


def _overlapping_one_of(schema):
    """The audit's issue for a `oneOf` whose branches `one_of.disjoint` cannot tell apart, or None.  llguidance
    proves some such oneOfs exact by reading a branch as closed to the names it does not declare, which
    holds for what it generates but not for what validates: with `[{required: [a, t]}, {required: [t]}]`,
    an output of the first branch validates the second too."""
    from radixlm.constrained.schema_audit import audit

    return next((i for i in audit(schema) if i.keyword == "oneOf"), None)


def check(kind: str, text: str, any_whitespace: bool, bounded_numbers: bool, tokenizer=None) -> str:
    """The grammar text once llguidance accepted it (GrammarError with its reason otherwise)."""
    import llguidance as llg

    grammar = grammar_text(kind, text, any_whitespace, bounded_numbers)
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    if is_error:
        what = "json_schema" if kind.startswith("json") else kind
        message = messages[0] if messages else "rejected"
        keyword = refused_keyword(message)
        where = re.search(r"while processing [^\s#]*#(/\S*)", message)
        pointer = where.group(1) if where else first_pointer(_parsed(text), keyword) if keyword else None
        at = f" at {pointer}/{keyword}" if pointer is not None and keyword else ""
        named = f"keyword {keyword!r}{at} is not enforced: " if keyword else ""
        raise GrammarError(f"invalid {what} (llguidance): {named}{message}")
    return grammar


_REFUSALS = ((re.compile(r'Unimplemented keys: \["([^"]+)"'), None), (re.compile(r"\boneOf constraints"), "oneOf"),
             (re.compile(r"Unknown format"), "format"), (re.compile(r"circular references"), "$ref"))


def _parsed(text: str):
    import json

    try:
        return json.loads(text)
    except ValueError:
        return None


def first_pointer(node, keyword: str, pointer: str = ""):
    """The JSON pointer of the first object holding `keyword` (depth first, document order), or None."""
    if isinstance(node, dict):
        if keyword in node:
            return pointer
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return None
    for key, value in items:
        if key in VALUE_KEYWORDS:
            continue
        found = first_pointer(value, keyword, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}")
        if found is not None:
            return found
    return None


def refused_keyword(message: str):
    """The JSON-schema keyword an llguidance refusal is about, where its message says (else None)."""
    for pattern, keyword in _REFUSALS:
        found = pattern.search(message)
        if found:
            return keyword or found.group(1)
    return None


def compile_template(llg_tokenizer, kind: str, text: str, any_whitespace: bool, bounded_numbers: bool) -> tuple:
    """(a matcher at the start of the grammar, its llguidance grammar text); each request gets a deep copy of the
    matcher.  The copies share its lexer, whose limits count every state any of them built: once they are spent,
    every copy starts in error, and `template(llg_tokenizer, grammar text)` builds a fresh one."""
    grammar = check(kind, text, any_whitespace, bounded_numbers, llg_tokenizer)
    matcher = template(llg_tokenizer, grammar)
    if matcher.is_error():
        raise GrammarError(f"invalid {kind} (llguidance): {matcher.get_error()}")
    return matcher, grammar


# llguidance's default lexer fuel, 200k a mask and 1M for what is built at once (a copy replaying tokens), is about
# 14 ms and 20 ms of work; a template whose matcher ran past its limits is built again with these (about 100 ms
# at most a mask; the states it builds are kept): word-count patterns with long lengths
# (`^(?:\S+\s+){0,99}\S+$` up to 5,000 characters, Github_easy o21053) need about 1.5M when their string opens,
# and a copy replaying into that string 5M.
RAISED_LIMITS = {"step_lexer_fuel": 1_500_000, "initial_lexer_fuel": 5_000_000}


def template(llg_tokenizer, grammar: str, raised: bool = False):
    """A matcher at the start of the grammar; raised: with RAISED_LIMITS instead of llguidance's defaults."""
    import llguidance as llg

    if not raised:
        return llg.LLMatcher(llg_tokenizer, grammar, log_level=0)
    return llg.LLMatcher(llg_tokenizer, grammar, log_level=0, limits=llg.LLParserLimits(**RAISED_LIMITS))


def make_tokenizer(tokenizer, vocab_size: int, stop_token_ids):
    import llguidance.hf

    stops = sorted(stop_token_ids) if stop_token_ids else None
    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=stops)


class LlgMatcher(Matcher):
    """One request's llguidance state, with matcher.Matcher's verbs and reference semantics (accept_tokens and
    the token mask are Matcher's own)."""

    def __init__(self, matcher, vocab_size: int, stop_token_ids, jump_forward: bool = True, allowed=None,
                 allowed_words=None, rebuild=None):
        self.allowed = allowed     # int32 [ceil(V / 32)] ANDed into every filled row (GrammarBackend.json_tokens)
        self._rebuild = rebuild    # -> a copy of a freshly built template (compile_template), or None
        self._tokens: list = []    # the tokens consumed (not the stop token), to replay into such a copy
        self._words = allowed_words if allowed_words is not None or allowed is None else allowed.tolist()
        self._m = matcher
        self.vocab_size = vocab_size
        self.stop_ids = sorted(stop_token_ids or ())
        self.jump_forward = jump_forward
        self.accepted = 0
        self._stops: list = []          # per accepted token: was it the stop token
        self._terminated = False

    def accept_token(self, token: int) -> bool:
        if not 0 <= token < self.vocab_size or self._terminated:
            return False
        if not self._allowed(token):
            return False
        if token in self.stop_ids:
            if not self._m.is_accepting():
                return False
            self._terminated = True
        else:
            if self._m.validate_tokens([token]) != 1:
                return False
            if not self._m.consume_token(token):
                if self._m.is_error():   # past a limit: `error` says which
                    return False
                raise RuntimeError(f"llguidance refused a validated token: {self._m.get_error()}")
            self._tokens.append(token)
        self._stops.append(token in self.stop_ids)
        self.accepted += 1
        return True

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        undone = self._stops[-n:]
        del self._stops[-n:]
        real = sum(1 for s in undone if not s)
        if any(undone):
            self._terminated = False
        if real:
            self._m.rollback(real)
            del self._tokens[-real:]
        self.accepted -= n

    def _fill_native(self, bitmask, row: int) -> None:
        from llguidance.torch import fill_next_token_bitmask

        if self._terminated:
            bitmask[row].zero_()
        else:
            fill_next_token_bitmask(self._m, bitmask, row)

    def native_matcher(self) -> tuple:
        return (None, None) if self._terminated else ("llguidance", self._m)

    def finish_fill(self, bitmask, row: int) -> None:
        """The stop tokens: allowed exactly where the grammar may end (llguidance's mask leaves them out).  A
        matcher past its limits is replaced once by a copy of a fresh template that consumed the same tokens
        (the limits count what every copy of the old template built), and the row filled again."""
        if self._terminated:
            return
        if self._m.is_error() and self._recover():
            from llguidance.torch import fill_next_token_bitmask

            fill_next_token_bitmask(self._m, bitmask, row)
            if self.allowed is not None:
                bitmask[row] &= self.allowed
        ending = self._m.is_accepting()
        for t in self.stop_ids:
            word, bit = divmod(t, 32)
            value = int(bitmask[row, word])
            value = (value | (1 << bit)) if ending else (value & ~(1 << bit))
            bitmask[row, word] = value - (1 << 32) if value >= 1 << 31 else value

    def is_terminated(self) -> bool:
        return self._terminated

    def _recover(self) -> bool:
        rebuild, self._rebuild = self._rebuild, None          # once per request
        if rebuild is None:
            return False
        fresh = rebuild()
        if (self._tokens and not fresh.consume_tokens(self._tokens)) or fresh.is_error():
            return False
        self._m = fresh
        return True

    @property
    def error(self):
        """Why llguidance stopped (its lexer or parser ran past a limit), or None: its masks then allow nothing."""
        return self._m.get_error().split("\n", 1)[0] if self._m.is_error() else None

    def find_jump_forward_string(self) -> str:
        if not self.jump_forward or self._terminated:
            return ""
        return self._m.compute_ff_bytes().decode("utf-8")
