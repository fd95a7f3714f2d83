"""Grammars whose forced text never ends: refused, or compiled with jump-forward off.

Oracles: hand-derived productivity of small grammars (each case says why), the JSONSchemaBench dev
schemas (every one has valid instances, so none may lose jump-forward or be refused), and XGrammar's
own acceptance of the tokens a dead branch starts with.  XGrammar's `find_jump_forward_string()` is
never called on a grammar this check calls unsafe: it would not return.
"""

import json
import pathlib

import pytest

from radixlm.constrained.backend import GrammarBackend, GrammarError
from radixlm.constrained.grammar_check import GrammarSyntaxUnknown, analyze
from radixlm.constrained.jump_forward import jump_forward

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "jsonschemabench-dev" / "schemas"
RECURSIVE_SCHEMA = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}},
                                    "required": ["c"]}}, "$ref": "#/$defs/n"}


@pytest.fixture(scope="module")
def backend(smol_tokenizer):
    b = GrammarBackend(smol_tokenizer, 49152, {2})
    yield b
    b.shutdown()


# (printed grammar, root productive, unproductive reachable rules)
CASES = [
    ('root ::= (("ab" root))', False, ("root",)),                                   # no base case
    ('root ::= (("a") | ("b" x))\nx ::= (("c" x))', True, ("x",)),                  # a dead branch
    ('root ::= (("a" x*))\nx ::= (("c" x))', True, ("x",)),                         # reachable, never needed
    ('root ::= ((x{0, 3}))\nx ::= (("c" x))', True, ("x",)),
    ('root ::= ((x+))\nx ::= (("c" x))', False, ("root", "x")),                      # + needs one x
    ('root ::= ((x{2, -1}))\nx ::= (("c" x) | ("d"))', True, ()),
    ('root ::= (("a" y))\ny ::= (("b" y) | (z))\nz ::= ((""))', True, ()),           # right recursion ends
    ('root ::= (("a" root-x))\nroot-x ::= (([\\]"] root-x) | ("\\""))', True, ()),  # escapes, '-' in names
    ('root ::= (("x" (=("y"))))', True, ()),                                        # a lookahead consumes nothing
    ('root ::= (("q" dead?))\ndead ::= ((dead "z"))\nunused ::= ((unused))', True, ("dead",)),  # unused: unreachable
    ('root ::= TagDispatch(\n  ("<t>", grp),\n  loop_after_dispatch=true\n)\ngrp ::= ((grp "x"))', True, ("grp",)),
]


@pytest.mark.parametrize("text,root_ok,dead", CASES, ids=[str(i) for i in range(len(CASES))])
def test_productivity_of_small_grammars(text, root_ok, dead):
    result = analyze(text)
    assert (result.root_productive, result.unproductive) == (root_ok, dead)


def test_unknown_syntax_is_reported_not_guessed():
    with pytest.raises(GrammarSyntaxUnknown):
        analyze('root ::= (("a" @weird))')
    with pytest.raises(GrammarSyntaxUnknown):
        analyze('root ::= ((missing_rule))')


@pytest.mark.parametrize("key", [("json", json.dumps(RECURSIVE_SCHEMA)), ("ebnf", 'root ::= "ab" root')],
                         ids=["recursive-schema", "recursive-ebnf"])
def test_grammars_without_finite_output_are_refused(backend, key):
    with pytest.raises(GrammarError, match="admits no finite output") as info:
        backend.compile(key, timeout=30)
    assert str(info.value).startswith("invalid json_schema" if key[0] == "json" else "invalid ebnf")


def test_dead_branch_compiles_with_jump_forward_off(backend, smol_tokenizer):
    compiled = backend.compile(("ebnf", 'root ::= "a" | "b" x\nx ::= "c" x'), timeout=30)
    assert not compiled.jump_forward
    m = backend.matcher(compiled)
    b = smol_tokenizer.encode("b", add_special_tokens=False)
    assert m.accept_tokens(b)                    # xgrammar enters the branch that cannot finish
    assert m.find_jump_forward_string() == ""    # where xgrammar's own search would never return
    assert jump_forward(m, smol_tokenizer, b, budget=64) is None
    assert m.accept_tokens(smol_tokenizer.encode("ccc", add_special_tokens=False))   # decoding goes on


def test_finite_grammars_keep_jump_forward(backend, smol_tokenizer):
    compiled = backend.compile(("json", json.dumps({"type": "object", "properties": {"name": {"type": "string"}},
                                                    "required": ["name"]})), timeout=30)
    assert compiled.jump_forward
    assert backend.matcher(compiled).find_jump_forward_string().startswith('{"name":')


def test_every_benchmark_schema_keeps_jump_forward(backend):
    import xgrammar as xgr

    checked = 0
    for path in sorted(DATA.iterdir()):
        try:
            grammar = xgr.Grammar.from_json_schema(path.read_text())
        except Exception:
            continue             # refused by XGrammar: covered by the JSONSchemaBench engine test
        result = analyze(str(grammar))
        assert result.root_productive and not result.unproductive, (path.name, result)
        checked += 1
    assert checked >= 90
