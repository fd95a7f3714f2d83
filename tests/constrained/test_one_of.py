"""constrained/one_of.py: when a oneOf read as anyOf is exact.  Oracle: for each pair verdict, instances
checked with jsonschema (a disjoint verdict is also checked by compiling and matching in
test_no_silent_drop and the held-out grammar walks)."""

import jsonschema
import pytest

from radixlm.constrained.one_of import disjoint, make_exclusive
from radixlm.constrained.schema_audit import resolve

ROOT = {"$defs": {"when": {"type": "string", "format": "date-time"},
                  "dog": {"type": "object", "properties": {"kind": {"const": "dog"}, "bark": {"type": "string"}},
                          "required": ["kind"]},
                  "cat": {"type": "object", "properties": {"kind": {"const": "cat"}}, "required": ["kind"]}}}

CASES = [
    ([{"$ref": "#/$defs/when"}, {"type": "null"}], True),
    ([{"$ref": "#/$defs/dog"}, {"$ref": "#/$defs/cat"}], True),                       # discriminator
    ([{"type": "object", "properties": {"a": {}}, "required": ["a"]},
      {"type": "object", "properties": {"b": {}}, "required": ["b"]}], True),          # strict objects
    ([{"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]},
      {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"]}], False),  # {"a":1,"b":2}
    ([{"type": "string"}, {"type": "string", "maxLength": 3}], False),
    ([{"type": "integer"}, {"type": "number"}], False),
    ([{"type": "array"}, {"anyOf": [{"type": "string"}, {"type": "null"}]}], True),
    ([{"type": "object", "additionalProperties": {}}, {"type": "object", "properties": {"b": {}},
                                                       "required": ["b"]}], False),
]


@pytest.mark.parametrize("branches,expected", CASES)
def test_disjoint(branches, expected):
    assert disjoint(branches, ROOT, resolve) is expected


def test_overlap_verdicts_have_a_witness():
    """Each False verdict above is a real overlap: an instance valid under two branches."""
    witnesses = {3: {"a": 1, "b": 2}, 4: "ab", 5: 1, 7: {"b": 1}}
    for i, value in witnesses.items():
        branches = CASES[i][0]
        assert sum(jsonschema.Draft202012Validator({**ROOT, **b}).is_valid(value) for b in branches) >= 2


def test_make_exclusive_leaves_out_the_other_branches_required_names():
    node = {"type": "object", "oneOf": [
        {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "required": ["b"]}]}
    make_exclusive(node)
    assert [sorted(b["properties"]) for b in node["oneOf"]] == [["a", "c"], ["b", "c"]]
    assert disjoint(node["oneOf"], node, resolve)
