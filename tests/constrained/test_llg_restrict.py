"""Keywords llguidance refuses ("Unimplemented keys": dependencies, if, uniqueItems) enforced by the same
restrictions XGrammar's schemas get (schema_restrict, open_objects): they compiled to a 400 before.

Oracles: llguidance's own refusal of the schema as sent (the old behaviour, asserted first), and
`jsonschema` on every finished output of seeded random walks over the compiled grammar, plus an instance
the rewrite must refuse."""

import json
import random

import jsonschema
import pytest
from grammar_walk import accepts_text, walk
from tiny_models import make_tiny_tokenizer

from radixlm.constrained import llg
from radixlm.constrained.backend import GrammarBackend

DRAFT7 = "http://json-schema.org/draft-07/schema#"
# (schema, an instance the grammar must refuse: it violates the schema)
CASES = [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 1]),
    ({"$schema": DRAFT7, "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependencies": {"a": ["b"]}}, {"a": 1}),
    ({"$schema": DRAFT7, "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependencies": {"a": {"properties": {"b": {"minimum": 5}}}}}, {"a": 1, "b": 1}),
    ({"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
      "if": {"properties": {"kind": {"const": "big"}}}, "then": {"properties": {"n": {"minimum": 100}}}},
     {"kind": "big", "n": 1}),
]


@pytest.fixture(scope="module")
def tiny():
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="llguidance")
    yield tok, backend
    backend.shutdown()


@pytest.mark.parametrize("schema,bad", CASES)
def test_llguidance_refused_these_keywords(schema, bad):
    """The old behaviour: llguidance itself refuses the schema as sent."""
    import llguidance as llgd

    grammar = llgd.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    is_error, messages = llgd.LLMatcher.validate_grammar_with_warnings(grammar)
    assert is_error and "Unimplemented keys" in messages[0]
    with pytest.raises(jsonschema.ValidationError):
        validate(bad, schema)


def validate(instance, schema):
    jsonschema.validators.validator_for(schema)(schema).validate(instance)


@pytest.mark.parametrize("schema,bad", CASES)
def test_rewritten_and_enforced(tiny, schema, bad):
    tok, backend = tiny
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    assert compiled.engine == "llguidance"
    assert not accepts_text(backend.matcher(compiled), tok, json.dumps(bad), tok.eos_token_id)
    rng, done = random.Random(0), 0
    for _ in range(30):
        m = backend.matcher(compiled)
        ids, finished = walk(m, len(tok), rng, 80)
        if finished:
            text = tok.decode([t for t in ids if t != tok.eos_token_id])
            validate(json.loads(text), schema)
            done += 1
    assert done >= 5


def test_a_rewrite_that_would_need_a_closed_object_is_still_refused():
    """dependencies naming a property that additionalProperties: false forbids: XGrammar's rewrite leaves the
    trigger out of `properties`, which does not keep it out of an llguidance object: refused, naming it."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x": {}},
              "dependencies": {"a": ["b"]}}
    with pytest.raises(Exception, match="dependencies"):
        llg.check("json", json.dumps(schema), False, True)
