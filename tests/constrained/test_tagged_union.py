"""An `allOf` of `if`/`then` parts that switch on one property (JSON Schema Store's tagged unions, e.g.
minecraft-item-modifier's number providers, which were refused: "an intersection of schemas that do not
merge") compiles as one branch per case.  Oracle: `jsonschema` on the schema as written, for the instances the
matcher must take and refuse, and for every finished random walk of the grammar."""

import jsonschema
import pytest
from grammar_walk import check_compiled

from radixlm.constrained.tagged_union import tagged_union

PROVIDER = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["constant", "uniform", "score"]}},
    "allOf": [
        {"if": {"properties": {"type": {"const": "constant"}}},
         "then": {"properties": {"value": {"type": "integer"}}, "required": ["value"]}},
        {"if": {"properties": {"type": {"const": "uniform"}}, "required": ["type"]},
         "then": {"properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}, "required": ["min", "max"]}},
        {"if": {"type": "object", "properties": {"type": {"enum": ["score"]}}},
         "then": {"properties": {"target": {"type": "string", "maxLength": 8}}, "required": ["target"]}},
    ],
}
ACCEPTED = [{"type": "constant", "value": 3}, {"type": "uniform", "min": 1, "max": 2}, {"type": "score", "target": "a"}]
REFUSED = [{"type": "constant"}, {"type": "uniform", "min": 1}, {"type": "score", "target": 5},
           {"type": "constant", "value": "x"}, {"value": 3}]


@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
def test_tagged_union_compiles_and_every_output_is_valid(tiny, engine):
    tok, backends = tiny
    for instance in REFUSED[:4]:
        assert not jsonschema.Draft202012Validator(PROVIDER).is_valid(instance)
    check_compiled(backends[engine], tok, PROVIDER, ACCEPTED, REFUSED, walks=40)


def test_the_rewrite_names_each_case_and_keeps_other_parts():
    schema = {**PROVIDER, "allOf": PROVIDER["allOf"] + [{"required": ["type"]}]}
    out = tagged_union(schema)
    rest, (union,) = out["allOf"][:-1], out["allOf"][-1:]
    assert rest == [{"required": ["type"]}]
    tags = [b["properties"]["type"] for b in union["anyOf"]]
    assert tags == [{"const": "constant"}, {"const": "uniform"}, {"const": "score"}]
    assert all(b["type"] == "object" and b["required"] == ["type"] for b in union["anyOf"])


@pytest.mark.parametrize("parts", [
    # the cases share a value (1 and 1.0 are equal in JSON Schema): an object could meet both ifs
    [{"if": {"properties": {"k": {"const": 1}}}, "then": {"required": ["a"]}},
     {"if": {"properties": {"k": {"enum": [2, 1.0]}}}, "then": {"required": ["b"]}}],
    # two properties switched on
    [{"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["a"]}},
     {"if": {"properties": {"j": {"const": "b"}}}, "then": {"required": ["b"]}}],
    # an else applies where no if holds
    [{"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["a"]}, "else": {"required": ["c"]}},
     {"if": {"properties": {"k": {"const": "b"}}}, "then": {"required": ["b"]}}],
    # an if that asks more than the value
    [{"if": {"properties": {"k": {"const": "a"}}, "minProperties": 2}, "then": {"required": ["a"]}},
     {"if": {"properties": {"k": {"const": "b"}}}, "then": {"required": ["b"]}}],
], ids=["shared-value", "two-properties", "else", "more-than-the-value"])
def test_a_switch_that_is_not_clean_is_left_as_it_is(parts):
    schema = {"type": "object", "allOf": parts}
    assert tagged_union(schema) is schema


SWITCH = [{"if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}},
          {"if": {"properties": {"kind": {"const": "b"}}}, "then": {"properties": {"y": {"type": "string"}},
                                                                      "required": ["y"]}}]


@pytest.mark.parametrize("schema,accepted,refused", [
    # the other types of `type` keep a branch: an if about properties holds for a string, whose then is vacuous
    ({"type": ["string", "object"], "properties": {"kind": {"enum": ["a", "b"]}}, "allOf": SWITCH},
     ["hello", {"kind": "a", "x": 1}, {"kind": "b", "y": "z"}], [{"kind": "a"}, {"kind": "b", "y": 1}, 5]),
    # JSON Schema Store's minecraft scoreboard target: a string enum beside an object union, whose object
    # branches no value meets (they are left out, the strings remain)
    ({"type": ["string", "object"], "enum": ["this", "killer"], "allOf": SWITCH},
     ["this", "killer"], ["other", {"kind": "a", "x": 1}]),
], ids=["string-or-union", "enum-beside-union"])
def test_other_types_beside_the_union_keep_a_branch(tiny, schema, accepted, refused):
    tok, backends = tiny
    check_compiled(backends["xgrammar"], tok, schema, accepted, refused, walks=30)
