"""Compiling one (kind, text) key: size and nesting bounds first, then the engine (`choose_engine`: XGrammar,
or llguidance for `--grammar-backend llguidance`, and under `auto` for a JSON schema XGrammar would not
enforce whole), then the grammar, then whether it admits a finite output (and so whether jump-forward
may run on it).  A JSON schema for XGrammar is normalized (schema_normalize), audited (schema_audit:
a keyword it would drop is refused with its JSON pointer), and its numbers bounded (numbers.py).
Runs in the caller's thread pool or in the compile worker process."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.constrained.ebnf_dedupe import dedupe_rules
from radixlm.constrained.errors import GrammarError
from radixlm.constrained.grammar_check import GrammarSyntaxUnknown, analyze
from radixlm.constrained.numbers import bound_numbers
from radixlm.constrained.one_of_exclusive import exclusive_one_ofs
from radixlm.constrained.schema_audit import first_issue, resolve
from radixlm.constrained.schema_impossible import forbid_refused_names
from radixlm.constrained.schema_leave_out import MAX_LEAVE_OUTS, leave_out
from radixlm.constrained.schema_normalize import finished, load_schema, merge, normalize_schema, push_into_branches
from radixlm.constrained.schema_restrict import inline_all_of_refs, inline_ref_siblings

logger = logging.getLogger(__name__)

MAX_GRAMMAR_CHARS = 1 << 20
MAX_NESTING = 128
NARROW_CHARS = 2_000_000      # narrowings of one schema times its length at most (each re-runs the audit)
_CPP_PREFIX = re.compile(r"^\s*\[[0-9:]+\]\s+\S+:\d+:\s*")


def backend_message(exc: BaseException) -> str:
    """XGrammar's own message without its '[time] file.cc:line:' prefix."""
    text = str(exc).strip() or type(exc).__name__
    return _CPP_PREFIX.sub("", text).strip()


ENGINES = ("xgrammar", "llguidance", "auto")


@dataclass(frozen=True)
class Options:
    """How keys compile: the engine choice, JSON whitespace and layout, and whether numbers are bounded."""

    engine: str = "xgrammar"
    any_whitespace: bool = False
    bounded_numbers: bool = True
    indent: Optional[int] = None     # XGrammar's JSON-schema grammars: one value per line, nested this deep


@dataclass
class Compiled:
    """A compiled grammar and whether jump-forward provably terminates on it (see grammar_check).  Shared by the
    requests of one grammar; only an llguidance template that ran out of its limits is replaced (backend.matcher)."""

    grammar: Any              # xgrammar.CompiledGrammar, or an llguidance.LLMatcher at the grammar's start
    jump_forward: bool
    engine: str = "xgrammar"
    kind: Optional[str] = None   # the key's kind (json, json_builtin, regex, ebnf, structural_tag)
    source: Optional[str] = None  # llguidance: the grammar text, to build the template again (llg.compile_template)

    def size_bytes(self) -> int:
        return self.grammar.memory_size_bytes if self.engine == "xgrammar" else 1 << 16


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


def _json_for_xgrammar(text: str, opts: Options, where: str = "", narrow: bool = False):
    """The normalized schema text; GrammarError naming the keyword XGrammar would not enforce.  narrow: where
    an instance need not reach that keyword, a grammar that never writes it instead (schema_leave_out)."""
    schema = load_schema(text)
    if schema is None:
        return text
    fixed = normalize_schema(inline_all_of_refs(schema, resolve), "xgrammar", opts.bounded_numbers)
    fixed = inline_ref_siblings(fixed, merge, resolve, settle=push_into_branches)
    exclusive_one_ofs(fixed, resolve)
    forbid_refused_names(fixed, resolve)
    issue = first_issue(fixed)
    for _ in range(min(MAX_LEAVE_OUTS, NARROW_CHARS // max(len(text), 1)) if narrow else 0):
        done = leave_out(fixed, issue, resolve) if issue is not None and issue.kind == "unsupported" else None
        if done is None:
            break
        logger.info("json_schema narrowed: %s (keyword %r at %s%s is not enforced by XGrammar)", done,
                    issue.keyword, where, issue.pointer)
        issue = first_issue(fixed)
    if issue is not None:
        exc = GrammarError(issue._replace(pointer=where + issue.pointer).message("xgrammar"))
        exc.issue = issue
        raise exc
    return json.dumps(finished(fixed))


def _structural_tag(text: str, opts: Options) -> str:
    """The tag with each embedded json_schema normalized and audited as a json_schema is."""
    tag = load_schema(text)
    if tag is None:
        return text

    def walk(node, ptr):
        if isinstance(node, dict):
            if node.get("type") == "json_schema" and isinstance(node.get("json_schema"), (dict, bool)):
                fixed = _json_for_xgrammar(json.dumps(node["json_schema"]), opts, f"{ptr}/json_schema", narrow=True)
                return {**node, "json_schema": json.loads(fixed)}
            return {k: walk(v, f"{ptr}/{k}") for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{ptr}/{i}") for i, v in enumerate(node)]
        return node
    return json.dumps(walk(tag, ""))


def build_grammar(xgr, kind: str, text: str, opts: Options):
    Grammar = xgr.Grammar
    if kind == "json":
        grammar = Grammar.from_json_schema(_json_for_xgrammar(text, opts, narrow=True),
                                           any_whitespace=opts.any_whitespace and not opts.indent,
                                           indent=opts.indent or None)
    elif kind == "json_builtin":
        grammar = Grammar.builtin_json_grammar()
    elif kind == "regex":
        return Grammar.from_regex(text)
    elif kind == "ebnf":
        return Grammar.from_ebnf(text)
    elif kind == "structural_tag":
        grammar = Grammar.from_structural_tag(_structural_tag(text, opts))
    else:
        raise GrammarError(f"unknown grammar kind {kind!r}")
    ebnf, changed = str(grammar), 0
    if opts.bounded_numbers:
        ebnf, changed = bound_numbers(ebnf)
    merged = dedupe_rules(ebnf)[0] if kind == "json" else ebnf
    if merged != ebnf:
        try:
            return Grammar.from_ebnf(merged)
        except Exception:  # noqa: BLE001 - a name the merge misread: the grammar as it was
            logger.warning("merging equal grammar rules failed; compiling them apart", exc_info=True)
    return Grammar.from_ebnf(ebnf) if changed else grammar


def choose_engine(kind: str, text: str, opts: Options) -> tuple[str, Optional[GrammarError]]:
    """("xgrammar" | "llguidance", the XGrammar refusal that sent a JSON schema to llguidance or None)."""
    from radixlm.constrained import llg

    if opts.engine == "xgrammar" or kind not in llg.KINDS:
        return "xgrammar", None
    if opts.engine == "llguidance":
        issue = first_issue(load_schema(text)) if kind == "json" else None
        if issue is not None and issue.kind == "unsatisfiable":
            raise GrammarError(issue.message())
        return "llguidance", None
    if kind != "json":
        return "xgrammar", None
    try:
        _json_for_xgrammar(text, opts)
    except GrammarError as exc:
        issue = getattr(exc, "issue", None)
        if issue is not None and issue.kind == "unsupported":
            return "llguidance", exc
        raise GrammarError(str(exc)) from None
    return "xgrammar", None


LLG_AFTER_TIMEOUT = "json/llguidance"   # key kind: a JSON schema XGrammar did not compile in time, under auto


def compile_key(xgr, compiler, key: tuple, opts: Options, llg_tokenizer=None) -> Compiled:
    """Compile (kind, text); GrammarError names what is wrong.  Without llg_tokenizer (the compile worker)
    an llguidance grammar is only validated: Compiled.grammar is then None."""
    kind, text = key
    check_size(kind, text)
    if kind == LLG_AFTER_TIMEOUT:
        return _compile_llg("json", text, opts, llg_tokenizer, _timed_out(text, opts))
    engine, refusal = choose_engine(kind, text, opts)
    if engine == "llguidance" and refusal is None:
        return _compile_llg(kind, text, opts, llg_tokenizer, refusal)
    if engine == "llguidance":
        try:
            return _compile_llg(kind, text, opts, llg_tokenizer, refusal)
        except GrammarError as exc:
            llg_refusal = exc             # neither engine enforces it whole: XGrammar narrowed, or this refusal
        try:
            grammar = build_grammar(xgr, kind, text, opts)
            return Compiled(compiler.compile_grammar(grammar), check_finite(grammar, kind), kind=kind)
        except Exception:  # noqa: BLE001 - the narrowing did not get there either
            raise llg_refusal from None
    try:
        grammar = build_grammar(xgr, kind, text, opts)
    except GrammarError as exc:
        raise GrammarError(str(exc)) from None
    except Exception as exc:
        return _xgrammar_failed(kind, text, opts, llg_tokenizer, exc)
    jump_forward = check_finite(grammar, kind)
    try:
        return Compiled(compiler.compile_grammar(grammar), jump_forward, kind=kind)
    except Exception as exc:
        return _xgrammar_failed(kind, text, opts, llg_tokenizer, exc)


def _xgrammar_failed(kind: str, text: str, opts: Options, llg_tokenizer, exc) -> Compiled:
    """XGrammar could not build a grammar the audit let through: under `auto` a JSON schema goes to llguidance
    (with XGrammar's message as the reason), otherwise the request is refused with that message."""
    refusal = GrammarError(f"invalid {_WHAT.get(kind, kind)}: {backend_message(exc)}")
    if opts.engine == "auto" and kind == "json":
        return _compile_llg(kind, text, opts, llg_tokenizer, refusal)
    raise refusal from None


def _timed_out(text: str, opts: Options) -> GrammarError:
    """Why XGrammar did not answer: its compile ran past the deadline, and, where the audit (milliseconds) finds
    one, the keyword it would not have enforced anyway (so a refusal by llguidance too still names one)."""
    why = "XGrammar's compile ran past the server's --grammar-timeout"
    try:
        _json_for_xgrammar(text, opts)
    except GrammarError as exc:
        return GrammarError(f"{why}, and {exc}")
    return GrammarError(why)


def _compile_llg(kind: str, text: str, opts: Options, llg_tokenizer, refusal) -> Compiled:
    from radixlm.constrained import llg

    try:
        if llg_tokenizer is None:
            llg.check(kind, text, opts.any_whitespace, opts.bounded_numbers)
            return Compiled(None, True, "llguidance", kind)
        template, source = llg.compile_template(llg_tokenizer, kind, text, opts.any_whitespace, opts.bounded_numbers)
    except GrammarError as exc:
        if refusal is not None:
            raise GrammarError(f"{refusal}; llguidance refused it too: {exc}") from None
        raise
    return Compiled(template, True, "llguidance", kind, source)
