"""`unevaluatedProperties: false` beside the applicators that name the properties it counts as evaluated (the Compose
spec's services over allOf of $refs, Meltano's plugins over one $ref): the parts merged into one object, closed by
`additionalProperties: false`; with an anyOf part distributed, each branch closed.  Oracle: jsonschema (Draft
2020-12, which counts the names of allOf parts and $ref targets as evaluated) on the instances listed and on every
finished random walk over the grammar."""

import json
import random

import jsonschema
import pytest
from grammar_walk import accepts_text, walk

from radixlm.constrained.backend import GrammarError

DEFS = {"container": {"type": "object", "properties": {"image": {"type": "string"}}},
        "workload": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}
CASES = [
    # the Compose spec's service: allOf of two $refs beside the node's own properties
    ({"$defs": DEFS, "allOf": [{"$ref": "#/$defs/container"}, {"$ref": "#/$defs/workload"}],
      "properties": {"deploy": {"type": "boolean"}}, "unevaluatedProperties": False},
     [{"deploy": True, "image": "a", "replicas": 2}, {}], [{"other": 1}, {"image": 1}]),
    # Meltano's plugins: one $ref beside the node's own type
    ({"$defs": DEFS, "type": "object", "properties": {"w": {"$ref": "#/$defs/_w"}}},
     None, None),
    # an anyOf part distributed: each branch's names and the shared ones
    ({"allOf": [{"properties": {"kind": {"type": "string"}}, "required": ["kind"]},
                {"anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                           {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]}],
      "type": "object", "unevaluatedProperties": False},
     [{"kind": "x", "a": 1}, {"kind": "y", "b": True}], [{"kind": "x", "a": 1, "c": 2}, {"kind": "x"}]),
]
CASES[1] = ({"$defs": {"w": DEFS["workload"]}, "type": "object",
             "properties": {"w": {"$ref": "#/$defs/w", "properties": {"name": {"type": "string"}},
                                  "unevaluatedProperties": False}}},
            [{"w": {"replicas": 1, "name": "n"}}, {}], [{"w": {"replicas": 1, "other": 0}}])


def _closing(tok):
    return {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in '"}]')} | {tok.eos_token_id}


@pytest.mark.parametrize("schema,accepted,refused", CASES, ids=["allof-refs", "ref-siblings", "anyof-part"])
def test_closed_by_the_merged_names_and_every_output_valid(xgrammar_backend, schema, accepted, refused):
    tok, backend = xgrammar_backend
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in accepted + refused:
        assert validator.is_valid(instance) == (instance in accepted), instance    # the oracle's own verdict
        assert accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id) == (
            instance in accepted), instance
    rng, close, finished = random.Random(0), _closing(tok), 0
    for _ in range(40):
        ids, done = walk(backend.matcher(compiled), len(tok), rng, 80, prefer=lambda ok: [i for i in ok if i in close])
        if done:
            finished += 1
            value = json.loads(tok.decode(ids[:-1]))
            assert validator.is_valid(value), value
    assert finished >= 10


def test_an_allof_that_does_not_merge_is_still_refused(xgrammar_backend):
    """A part whose additionalProperties would apply to the other part's names does not merge: the unevaluated
    names cannot be closed, refused."""
    tok, backend = xgrammar_backend
    schema = {"type": "object", "allOf": [{"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
                                          {"properties": {"b": {"type": "string"}}}], "unevaluatedProperties": False}
    with pytest.raises(GrammarError, match="not enforced"):
        backend.compile(("json", json.dumps(schema)), timeout=60)
