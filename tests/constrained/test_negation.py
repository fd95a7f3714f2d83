"""`not` in the forms constrained/negation.py rewrites, against `jsonschema` on the schema as written: the
instances the matcher must take and refuse, and every finished random walk of the compiled grammar."""

import jsonschema
import pytest
from grammar_walk import check_compiled

from radixlm.constrained.negation import without_not

CASES = [
    # Github_hard o57622: a port range without three ports
    ({"type": "object", "properties": {"port": {"type": "integer", "minimum": 1024, "maximum": 65535,
                                                "not": {"enum": [6379, 6380, 43215]}}}, "required": ["port"]},
     [{"port": 1024}, {"port": 6378}, {"port": 6381}, {"port": 65535}],
     [{"port": 6379}, {"port": 6380}, {"port": 43215}, {"port": 1023}]),
    ({"type": "integer", "not": {"const": 0}}, [-3, 1, 7], [0]),
    ({"type": "integer", "exclusiveMinimum": 0.5, "maximum": 4, "not": {"enum": [1, 4.0, 9]}}, [2, 3], [1, 4, 0, 9]),
    ({"enum": ["red", "green", 1, True], "not": {"enum": [1.0, "green"]}}, ["red", True], ["green", 1]),
    ({"type": "boolean", "not": {"const": False}}, [True], [False]),
    ({"not": {"type": ["integer", "boolean"]}}, ["s", None, [1], {"a": 1}], [3, True, False]),
    ({"type": ["string", "number"], "not": {"type": "number"}}, ["s"], [1, 2.5]),
    ({"type": "string", "not": False}, ["s"], [1]),
]


@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
@pytest.mark.parametrize("schema,accepted,refused", CASES, ids=[str(i) for i in range(len(CASES))])
def test_not_is_enforced(tiny, engine, schema, accepted, refused):
    for instance in refused:
        assert not jsonschema.Draft202012Validator(schema).is_valid(instance), instance
    tok, backends = tiny
    check_compiled(backends[engine], tok, schema, accepted, refused, walks=20, min_finished=1)


def test_not_integer_keeps_the_other_types_and_leaves_numbers_out():
    """No grammar tells 2.5 from 2: without integers goes every number (a restriction)."""
    out = without_not({"not": {"type": "integer"}})
    assert set(out["type"]) == {"string", "boolean", "object", "array", "null"}


@pytest.mark.parametrize("schema,expected", [
    ({"enum": [1, 2], "not": {"enum": [2, 1.0]}}, False),
    ({"const": "a", "not": {"const": "a"}}, False),
    ({"type": "integer", "minimum": 3, "maximum": 3, "not": {"const": 3}}, False),
    ({"type": "null", "not": {"type": "null"}}, False),
    ({"type": "integer", "minimum": 5, "not": {"enum": [1, 2]}}, {"type": "integer", "minimum": 5}),
])
def test_nothing_left_is_false_and_nothing_removed_drops_the_not(schema, expected):
    assert without_not(schema) == expected


@pytest.mark.parametrize("schema", [
    {"type": "string", "not": {"enum": ["x"]}},                     # a string without some strings: no regex here
    {"not": {"type": "string", "pattern": "^x"}},
    {"type": "integer", "minimum": "10", "not": {"const": 12}},     # a bound that is not a number
    {"type": "integer", "multipleOf": 2, "not": {"const": 4}},
    {"not": {"type": ["integer"]}, "type": "number"},               # would leave nothing but non-integers
])
def test_other_forms_are_left_to_the_audit(schema):
    assert without_not(schema) is schema
