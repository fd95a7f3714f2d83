"""Keys outside the JSON Schema vocabulary (`x-intellij-html-description`, `markdownDescription`) beside `$ref`
or a combinator have no effect on validation: the schema compiles on XGrammar (it was refused with a 400
"a keyword beside $ref"), and the grammar still enforces the reference / the branches.

Oracle: `jsonschema` on an instance the grammar must accept and one it must refuse."""

import json

import jsonschema
import pytest
from grammar_walk import accepts_text
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend, GrammarError

DEFS = {"n": {"$ref": "#/$defs/m"}, "m": {"type": "integer"}}      # a reference to a reference: not inlined
CASES = [
    ({"$defs": DEFS, "type": "object", "required": ["p"],
      "properties": {"p": {"$ref": "#/$defs/n", "x-intellij-html-description": "<b>n</b>"}}}, {"p": 3}, {"p": "3"}),
    ({"$defs": DEFS, "type": "object", "required": ["p"], "additionalProperties": False,
      "properties": {"p": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}], "markdownDescription": "a number"}}},
     {"p": None}, {"p": "x"}),
]


@pytest.fixture(scope="module")
def tiny():
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="xgrammar")
    yield tok, backend
    backend.shutdown()


@pytest.mark.parametrize("schema,good,bad", CASES)
def test_unknown_keys_are_ignored_not_refused(tiny, schema, good, bad):
    tok, backend = tiny
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    assert accepts_text(backend.matcher(compiled), tok, json.dumps(good, separators=(", ", ": ")), tok.eos_token_id)
    assert not accepts_text(backend.matcher(compiled), tok, json.dumps(bad, separators=(", ", ": ")), tok.eos_token_id)


def test_a_vocabulary_keyword_beside_ref_is_still_refused(tiny):
    _, backend = tiny
    schema = {"$defs": DEFS, "properties": {"p": {"$ref": "#/$defs/n", "maximum": 3}}, "type": "object",
              "required": ["p"]}
    with pytest.raises(GrammarError, match="'maximum' at /properties/p/maximum"):
        backend.compile(("json", json.dumps(schema)), timeout=60)
