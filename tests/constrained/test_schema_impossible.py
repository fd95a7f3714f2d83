"""Schema nodes nothing validates, in places an instance need not reach: the schema compiles (it was refused
as "cannot all hold", though it has valid instances), the impossible place is never written, and every
finished random walk validates with `jsonschema`.  Where the node must be reached, the refusal stays."""

import json

import pytest
from grammar_walk import check_compiled

from radixlm.constrained.backend import GrammarError
from radixlm.constrained.one_of import RESTRICTED
from radixlm.constrained.schema_impossible import impossible

# (schema, valid instances the grammar takes, instances it must refuse)
REACHABLE_AROUND = [
    # an optional property whose enum holds no value of its type (JSONSchemaBench Github_medium o31090)
    ({"type": "object", "properties": {"builtin": {"type": "object", "enum": ["MODIFIABLE", "DELETABLE"]},
                                       "name": {"type": "string"}}},
     [{"name": "a"}, {}], [{"builtin": "MODIFIABLE"}, {"builtin": {}}]),
    ({"type": "object", "properties": {"cd": {"type": "array", "enum": ["eject", "deny"]}}},
     [{}], [{"cd": "eject"}, {"cd": []}]),
    ({"anyOf": [{"type": "integer", "minimum": 5, "maximum": 1}, {"type": "string"}]}, ["a"], [3, 5]),
    ({"oneOf": [{"type": "string", "minLength": 3, "maxLength": 2}, {"type": "string"}]}, ["abc"], [1]),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string", "enum": [1]}}, [{"a": 1}, {}], [{"b": "x"}, {"b": 1}]),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "integer", "enum": ["x"]}}}},
     [{"tags": []}, {}], [{"tags": [1]}, {"tags": ["x"]}]),
    # an optional object whose required property is impossible
    ({"type": "object", "properties": {"meta": {"type": "object", "properties": {"k": {"type": "string",
                                                                                      "enum": [1, 2]}},
                                                "required": ["k"]}}},
     [{}], [{"meta": {}}, {"meta": {"k": 1}}]),
    # a required name that a pattern admits in a closed object
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False,
      "required": ["xa"]}, [{"xa": 1}], [{}, {"xa": "a"}]),
]

MUST_REACH = [
    ({"type": "object", "properties": {"cd": {"type": "array", "enum": ["x"]}}, "required": ["cd"]},
     "'enum'", "/properties/cd/enum"),
    ({"anyOf": [{"type": "integer", "minimum": 5, "maximum": 1}]}, "'maximum'", "/anyOf/0/maximum"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": False, "required": ["b"]},
     "'required'", "/required"),
]


@pytest.mark.parametrize("schema,accepted,refused", REACHABLE_AROUND,
                         ids=["object-enum", "array-enum", "anyOf-branch", "oneOf-branch", "additionalProperties",
                              "items", "required-inside", "required-by-pattern"])
def test_an_impossible_place_that_need_not_be_reached_compiles_and_is_never_written(xgrammar_backend, schema,
                                                                                   accepted, refused):
    tok, backend = xgrammar_backend
    check_compiled(backend, tok, schema, accepted, refused)


@pytest.mark.parametrize("schema,keyword,pointer", MUST_REACH, ids=["required", "only-branch", "undeclared-required"])
def test_an_impossible_place_every_instance_reaches_is_refused(xgrammar_backend, schema, keyword, pointer):
    _, backend = xgrammar_backend
    with pytest.raises(GrammarError) as info:
        backend.compile(("json", json.dumps(schema)), timeout=60)
    assert "cannot all hold" in str(info.value) and keyword in str(info.value) and pointer in str(info.value)


def test_impossible_reads_the_schema_as_written():
    assert impossible(False) and impossible({"type": []}) and impossible({"type": "integer", "const": "a"})
    assert impossible({"type": "integer", "minimum": 5, "maximum": 1})
    assert not impossible({"minimum": 5, "maximum": 1}), "any string is valid"
    assert not impossible({"type": ["integer", "string"], "minimum": 5, "maximum": 1})
    assert not impossible({"type": "string", RESTRICTED: ["type"], "minimum": 5, "maximum": 1}), \
        "a type the normalizer inferred says nothing about what validates"
    assert impossible({"type": "integer", "enum": [1.5, "a"]}) and not impossible({"type": "integer", "enum": [2.0]})
    assert not impossible({"type": "object", "additionalProperties": False, "patternProperties": {"^x": {}},
                           "required": ["xa"]})
