"""A finished JSON-constrained output that its schema rejects is reported, never silent.

Oracles: jsonschema on hand-made instances, and XGrammar's own matcher: for keywords it drops, an
instance jsonschema rejects passes the grammar; each such instance must get a `schema_violation`.
"""

import json

import jsonschema
import pytest

from radixlm.constrained.output_check import check_finished_output, violation

# (keyword, schema, instance text jsonschema rejects)
DROPPED_CANDIDATES = [
    ("pattern+maxLength", {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, '"abcdef"'),
    ("pattern+minLength", {"type": "string", "pattern": "^[a-z]+$", "minLength": 4}, '"ab"'),
    ("number multipleOf", {"type": "number", "multipleOf": 0.5}, "0.3"),
    ("oneOf overlapping", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "3"),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1, 1]"),
    ("not", {"not": {"type": "integer"}}, "3"),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}}, '{"a": 1}'),
    ("allOf of objects", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                    {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
     '{"a": 1}'),
    ("raw control character", {"type": "string", "maxLength": 8}, '"a\x1db"'),
]


def test_violation_names_the_failing_path():
    schema = json.dumps({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}})
    assert violation(schema, '{"tags": [1, 2]}') is None
    msg = violation(schema, '{"tags": [1, 1]}')
    assert msg.startswith("the output violates the schema at /tags") and "unique" in msg
    assert violation(schema, '{"tags": [1, 2]').startswith("the output is not valid JSON")
    assert violation('"$$ANY$$"', "[1, 2]") is None and violation('"$$ANY$$"', "[1, 2") is not None


def test_every_instance_the_grammar_lets_through_is_reported(smol_tokenizer):
    """Each schema here has an invalid instance that plain XGrammar let through.  Now each is refused at compile
    (a GrammarError naming its keyword) or its instance is refused by the matcher; one still let through would be
    reported by the output check."""
    import xgrammar as xgr

    from radixlm.constrained.backend import GrammarBackend
    from radixlm.constrained.errors import GrammarError

    backend = GrammarBackend(smol_tokenizer, 49152, {2})
    outcomes = {}
    try:
        for name, schema, text in DROPPED_CANDIDATES:
            try:
                ok = jsonschema.validators.validator_for(schema)(schema).is_valid(json.loads(text))
            except ValueError:
                ok = False                                  # not JSON at all
            assert not ok, name
            try:
                compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
            except GrammarError as exc:
                assert "keyword" in str(exc) or "cannot all hold" in str(exc) or "invalid" in str(exc), (name, exc)
                outcomes[name] = "refused"
                continue
            matcher = xgr.GrammarMatcher(compiled.grammar)
            ids = smol_tokenizer.encode(text, add_special_tokens=False)
            if all(matcher.accept_token(t) for t in ids) and matcher.accept_token(2):
                outcomes[name] = "let through, reported"
                assert violation(json.dumps(schema), text) is not None, name
            else:
                outcomes[name] = "matcher refuses it"
    finally:
        backend.shutdown()
    assert "refused" in outcomes.values() and "matcher refuses it" in outcomes.values(), outcomes


class _State:
    def __init__(self, params, text, reason):
        self.req = type("Req", (), {"rid": "r", "sampling_params": params})()
        self.text, self.finish_reason = text, reason


@pytest.mark.parametrize("params,text,reason,flagged", [
    ({"json_schema": {"type": "integer", "multipleOf": 2}}, "3", {"type": "stop"}, True),
    ({"json_schema": '{"type": "integer", "multipleOf": 2}'}, "4", {"type": "stop"}, False),
    ({"json_schema": {"type": "integer"}}, "12", {"type": "length"}, False),       # cut short: not judged
    ({"regex": "a+"}, "b", {"type": "stop"}, False),                                 # not a JSON constraint
])
def test_listener_marks_the_finish_reason(params, text, reason, flagged):
    state = _State(params, text, dict(reason))
    check_finished_output(state, [], 0.0)
    assert ("schema_violation" in state.finish_reason) == flagged
