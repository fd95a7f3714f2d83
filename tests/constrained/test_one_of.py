"""constrained/one_of.py: when a oneOf read as anyOf is exact.  Oracle: for each pair verdict, instances
checked with jsonschema (a disjoint verdict is also checked by compiling and matching in
test_no_silent_drop and the held-out grammar walks)."""

import jsonschema
import pytest

from radixlm.constrained.one_of import disjoint
from radixlm.constrained.one_of_exclusive import make_exclusive
from radixlm.constrained.schema_audit import resolve

ROOT = {"$defs": {"when": {"type": "string", "format": "date-time", "description": "A time."},
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
    ([{"type": "string", "description": "a"}, {"$ref": "#/$defs/when", "description": "b"}], False),   # both strings
    ([{"type": "null"}, {"$ref": "#/$defs/when", "description": "b"}], True),          # a note beside the $ref
    ([{"type": "string", "not": {"const": "x"}}, {"type": "array"}], True),            # the type beside `not`
    ([{"type": "string", "not": {"const": "x"}}, {"type": "string"}], False),
    ([{"type": "object", "additionalProperties": {}}, {"type": "object", "properties": {"b": {}},
                                                       "required": ["b"]}], False),
]


@pytest.mark.parametrize("branches,expected", CASES)
def test_disjoint(branches, expected):
    assert disjoint(branches, ROOT, resolve) is expected


def test_overlap_verdicts_have_a_witness():
    """Each False verdict above is a real overlap: an instance valid under two branches."""
    witnesses = {3: {"a": 1, "b": 2}, 4: "ab", 5: 1, 7: "2026-12-08T00:00:00Z", 10: "y", 11: {"b": 1}}
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


# Shapes from JSONSchemaBench (lazygit's color, vega-lite's scale domain, a version filter, an F5 profile, an
# aerleon filter, ...) that were refused: (schema, instances the matcher takes, instances it refuses).
REAL_WORLD = [
    ({"oneOf": [{"enum": ["black", "red", "default"]}, {"pattern": "^#[0-9a-fA-F]{6}$"}]},
     ["red", "#00ff00"], [5, "#00ff0", "blue"]),
    ({"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "string"}}]},
     [[1.5], ["a", "b"]], [[], [1, "a"]]),
    ({"oneOf": [{"type": "string", "pattern": "^(\\*|[0-9](?:\\.(\\*|[0-9]{1,}))?)$"}, {"type": "null"},
                {"type": "string", "maxLength": 0}]},
     ["1.2", "*", None, ""], ["x", 1]),
    ({"oneOf": [{"properties": {"names": {"type": "array", "items": {"type": "string"}}}, "required": ["names"]},
                {"additionalProperties": False, "properties": {"name": {"type": "string"}}}]},
     [{"names": ["a"]}, {"name": "a"}, {}], [{"names": ["a"], "name": "b"}]),
    ({"oneOf": [{"type": "object", "required": ["header"], "properties": {"header": {"type": "object"}},
                 "additionalProperties": True},
                {"type": "object", "required": ["include"], "properties": {"include": {"type": "string"}},
                 "additionalProperties": False}]},
     [{"header": {}}, {"include": "x"}], [{"include": 1}, {}]),
    # an optional discriminator (o84383's operations): {"value": "a"} is valid under both, so each branch always
    # writes its `type`
    ({"$defs": {"exec": {"type": "object", "properties": {"type": {"enum": ["exec"]}, "value": {"type": "string"}},
                         "required": ["value"], "additionalProperties": False},
                "install": {"type": "object", "properties": {"type": {"enum": ["install"]}, "value": {"type": "string"}},
                            "required": ["value"], "additionalProperties": False}},
      "oneOf": [{"$ref": "#/$defs/exec"}, {"$ref": "#/$defs/install"}]},
     [{"type": "exec", "value": "a"}, {"type": "install", "value": "b"}], [{"value": "a"}, {"type": "x", "value": "a"}]),
    # null taken whole by two branches (JSON Schema Store's jscsrc): never valid, so never written
    ({"oneOf": [{"type": ["array", "null"], "items": {"type": "string"}}, {"type": "boolean"}, {"type": "null"}]},
     [["a"], [], True], [None, [1]]),
    # a branch that takes anything (Github_easy o2231's `#ref`, not a keyword) beside `null`: everything but null
    ({"oneOf": [{"type": "null"}, {"#ref": "#/$defs/other"}]}, ["a", 1, {}, []], [None]),
    # ONVIF's space selectors: patterns that are URLs, told apart by a literal at one position
    ({"oneOf": [{"type": "string", "pattern": "^http://x.org/tptz/PositionSpace$"},
                {"type": "string", "pattern": "^http://x.org/tptz/VelocitySpace$"}]},
     ["http://x.org/tptz/PositionSpace", "http://x.org/tptz/VelocitySpace"], ["http://x.org/tptz/Other", "x"]),
    # composer's repositories: a repository object, or one name set to false (Github_ultra o78463)
    ({"$defs": {"repo": {"type": "object", "properties": {"type": {"const": "composer"}, "url": {"type": "string"}},
                         "required": ["type", "url"]}},
      "type": "array", "items": {"oneOf": [{"$ref": "#/$defs/repo"}, {
          "type": "object", "additionalProperties": {"type": "boolean", "enum": [False]}, "minProperties": 1,
          "maxProperties": 1}]}},
     [[{"type": "composer", "url": "u"}], [{"packagist.org": False}]], [[{"type": "composer"}], [{"a": True}]]),
    # closed objects with no name in common (Github_trivial o10092's paging links): `{}` is valid under both, so
    # never an answer; each writes its property
    ({"oneOf": [{"additionalProperties": False, "properties": {"next": {"type": "string"}}},
                {"additionalProperties": False, "properties": {"previous": {"type": "string"}}}]},
     [{"next": "a"}, {"previous": "b"}], [{}, {"next": "a", "previous": "b"}]),
    # WashingtonPost's forbidden names (`{"not": {}}`), which were refused as negation
    ({"type": "object", "properties": {"a": {"type": "integer"}, "type": {"not": {}}}, "additionalProperties": False},
     [{"a": 1}, {}], [{"a": 1, "type": 2}]),
    # xAPI's inverse functional identifiers: each branch requires its own name and sets the others' to null
    # through patternProperties (llguidance proved it; it was refused here once llguidance was checked too)
    ({"oneOf": [{"type": "object", "properties": {"mbox": {"type": "string"}},
                 "patternProperties": {"^(sha|openid)$": {"type": "null"}}, "required": ["mbox"]},
                {"type": "object", "properties": {"sha": {"type": "string"}},
                 "patternProperties": {"^(mbox|openid)$": {"type": "null"}}, "required": ["sha"]}]},
     [{"mbox": "a"}, {"sha": "b"}], [{"mbox": "a", "sha": "b"}]),
    # Compose spec's string_or_list: a description beside the $ref that differs from its target's
    ({"$defs": {"list": {"type": "array", "description": "A list.", "items": {"type": "string"}}},
      "oneOf": [{"type": "string"}, {"$ref": "#/$defs/list", "description": "Strings."}]},
     ["a", ["b"]], [1]),
    # GitLab CI's include: the item's string branch narrowed (its `not` branch dropped) still only takes strings
    ({"$defs": {"item": {"oneOf": [{"type": "string", "anyOf": [{"pattern": "^https?://"},
                                                                 {"not": {"pattern": "^[a-z]+://"}}]},
                                   {"type": "object", "properties": {"local": {"type": "string"}},
                                    "required": ["local"], "additionalProperties": False}]}},
      "oneOf": [{"$ref": "#/$defs/item"}, {"type": "array", "items": {"$ref": "#/$defs/item"}}]},
     [{"local": "a"}, [], [{"local": "b"}, "https://"]], [1, "abc"]),
]

OVERLAPPING = [
    # the second branch's type is inferred for the grammar, but it accepts any integer as written: 5 is valid
    # under both (this compiled, and the grammar generated 5)
    ({"oneOf": [{"type": "integer"}, {"minLength": 1}]}, 5),
    # dependentRequired is compiled as "z is required": {"x": 1} is valid under both as written
    ({"oneOf": [{"type": "object", "properties": {"x": {}}, "required": ["x"]},
                {"type": "object", "properties": {"y": {}, "z": {}}, "dependentRequired": {"y": ["z"]}}]}, {"x": 1}),
    # patternProperties compiled as a closed object: {"ab": 1} is valid under both as written
    ({"oneOf": [{"type": "object", "properties": {"ab": {}}, "required": ["ab"]},
                {"type": "object", "properties": {"a1": {"type": "integer"}},
                 "patternProperties": {"^a[0-9]$": {"minimum": 0}, "^a": {"type": "integer"}}}]}, {"ab": 1}),
    # a branch that takes anything (Github_easy o2231's `#ref` is not a keyword) beside one that takes every
    # non-object and some objects: only an object the first refuses is valid; the `{}` branch was dropped once
    # (null is valid under both) and the grammar wrote {}
    ({"oneOf": [{"properties": {"twos": {"type": "array"}}}, {"#ref": "#/definitions/LevelTwoContainer"}]}, {}),
    # the empty array of a branch that can only be empty is valid under all three
    ({"oneOf": [{"type": "array", "maxItems": 0}, {"type": "array", "items": {"type": "string"}},
                {"type": "array", "items": {"type": "number"}}]}, []),
]


def _closing(tok):
    return {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in '"}]#')} | {tok.eos_token_id}


@pytest.mark.parametrize("schema,accepted,refused", REAL_WORLD,
                         ids=["enum-or-pattern", "arrays-by-item-type", "string-lengths", "closed-branch", "open-and-closed",
                              "optional-discriminator", "shared-null", "anything-but-null", "onvif-urls",
                              "composer-repositories",
                              "closed-objects", "not-anything", "null-by-pattern", "ref-with-description",
                              "narrowed-branch-types"])
def test_disjoint_branches_compile_and_every_output_is_valid(xgrammar_backend, schema, accepted, refused):
    """These compile on XGrammar (they were refused); the matcher takes the valid instances listed and refuses
    the others (invalid ones such as `[]`, valid under both array branches, and some valid ones the grammar
    does not generate, such as 5 for a pattern), and every finished random walk over the grammar validates
    with `jsonschema`, which checks that exactly one branch holds."""
    import json
    import random

    from grammar_walk import accepts_text, walk

    tok, backend = xgrammar_backend
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in accepted + refused:
        got = accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
        assert got == (instance in accepted), instance
        assert validator.is_valid(instance) or not got, instance
    rng, close, finished = random.Random(0), _closing(tok), 0
    for _ in range(40):
        ids, done = walk(backend.matcher(compiled), len(tok), rng, 60, prefer=lambda ok: [i for i in ok if i in close])
        if done:
            finished += 1
            value = json.loads(tok.decode(ids[:-1]))
            assert validator.is_valid(value), value
    assert finished >= 10


@pytest.mark.parametrize("schema,both", OVERLAPPING, ids=["inferred-type", "dependent-required", "closed-by-patterns",
                                                          "anything-branch", "only-empty"])
def test_a_branch_is_read_as_written_not_as_narrowed_for_the_grammar(xgrammar_backend, schema, both):
    """A value valid under two branches as the user wrote them (a witness, checked by `jsonschema`) is never
    an answer: XGrammar refuses the oneOf, naming it, where the normalizer narrowed a branch for the grammar."""
    import json

    from grammar_walk import accepts_text

    from radixlm.constrained.backend import GrammarError

    tok, backend = xgrammar_backend
    branches = schema["oneOf"]
    assert sum(jsonschema.Draft202012Validator(b).is_valid(both) for b in branches) >= 2
    try:
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    except GrammarError as exc:
        assert "'oneOf'" in str(exc) and "/oneOf" in str(exc)
        return
    assert not accepts_text(backend.matcher(compiled), tok, json.dumps(both), tok.eos_token_id)
