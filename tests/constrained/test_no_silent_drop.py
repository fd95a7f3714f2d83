"""Keywords XGrammar drops silently, one test each: the old behaviour (XGrammar compiles the schema and
its matcher accepts an instance that violates it, per `jsonschema`) is asserted first, so each case
is a real drop; then the backend must refuse the schema with a message naming the keyword and its
JSON pointer, or compile a grammar that refuses the instance.  Under `auto`, llguidance takes the
schemas it enforces whole."""

import json

import jsonschema
import pytest
import xgrammar as xgr
from grammar_walk import accepts_text
from tiny_models import make_tiny_tokenizer
from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

from radixlm.constrained.backend import GrammarBackend, GrammarError

# (schema, an instance that violates it, what the refusal names: keyword and pointer; None: enforced)
DROPS = [
    ({"type": "object", "properties": {"year": {"type": "string", "maxLength": 4, "pattern": "/^[0-9]{4}$/"}}},
     {"year": "/2001/"}, ("'pattern'", "/properties/year/pattern", "cannot all hold")),
    ({"type": "object", "properties": {"name": {"type": "string"}},
      "anyOf": [{"required": ["data_type"]}, {"required": ["kind"]}]},
     {"name": "x"}, None),
    ({"type": "string", "pattern": "^[0-9]+$", "maxLength": 4}, "12345", None),
    ({"type": "string", "pattern": "^[a-z]+[0-9]$", "maxLength": 3}, "abcd1", ("'maxLength'", "/maxLength", "")),
    ({"type": "string", "pattern": "^[0-9]{6}$", "maxLength": 4}, "123456", ("'maxLength'", "/maxLength",
                                                                              "cannot all hold")),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 1], ("'uniqueItems'", "/uniqueItems", "")),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, {"a": None}, ("'not'", "/properties/a/not", "")),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}}, {"a": 1}, ("'dependentRequired'", "/dependentRequired", "")),
    ({"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "integer"}}, ["a"],
     ("'contains'", "/contains", "")),
    ({"type": "number", "multipleOf": 0.5}, 0.3, ("'multipleOf'", "/multipleOf", "")),
    ({"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 0}]}, 5, ("'oneOf'", "/oneOf", "")),
    ({"$defs": {"p": {"type": "object", "properties": {"t": {"type": "string", "minLength": 2, "pattern": "^a"}}}},
      "$ref": "#/$defs/p"}, {"t": "a"}, ("'minLength'", "/$defs/p/properties/t/minLength", "")),
    ({"maxLength": 2}, "abc", None),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "if": {"required": ["a"]}, "then": {"required": ["b"]}}, {"a": 1}, ("'if'", "/if", "")),
]


@pytest.fixture(scope="module")
def tiny():
    tok = make_tiny_tokenizer()
    backends = {e: GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=e) for e in ("xgrammar", "auto")}
    yield tok, backends
    for b in backends.values():
        b.shutdown()


@pytest.mark.parametrize("schema,bad,named", DROPS, ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else "")
def test_dropped_keyword_is_enforced_or_refused(tiny, schema, bad, named):
    tok, backends = tiny
    text = json.dumps(bad)
    assert not jsonschema.Draft202012Validator(schema).is_valid(bad)
    assert xgr_accepts(xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False), text), \
        "the old behaviour: XGrammar alone accepts the violating instance"
    backend = backends["xgrammar"]
    try:
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    except GrammarError as exc:
        assert named is not None, f"refused although enforceable: {exc}"
        keyword, pointer, extra = named
        assert keyword in str(exc) and f"at {pointer}" in str(exc) and extra in str(exc), str(exc)
        return
    assert named is None, "compiled although it cannot be enforced"
    assert not accepts_text(backend.matcher(compiled), tok, text, tok.eos_token_id)


def test_auto_takes_llguidance_for_what_xgrammar_drops(tiny):
    tok, backends = tiny
    schema = {"type": "string", "pattern": "^[a-z]+[0-9]$", "maxLength": 3}
    compiled = backends["auto"].compile(("json", json.dumps(schema)), timeout=60)
    assert compiled.engine == "llguidance"
    m = backends["auto"].matcher
    assert accepts_text(m(compiled), tok, '"ab1"', tok.eos_token_id)
    assert not accepts_text(m(compiled), tok, '"abc1"', tok.eos_token_id)
    plain = backends["auto"].compile(("json", json.dumps({"type": "integer"})), timeout=60)
    assert plain.engine == "xgrammar"


def test_auto_still_refuses_what_cannot_hold_or_nobody_enforces(tiny):
    _, backends = tiny
    with pytest.raises(GrammarError, match="cannot all hold"):
        backends["auto"].compile(("json", json.dumps(DROPS[0][0])), timeout=60)
    with pytest.raises(GrammarError, match="'uniqueItems' at /uniqueItems.*llguidance refused it too"):
        backends["auto"].compile(("json", json.dumps(DROPS[5][0])), timeout=60)
