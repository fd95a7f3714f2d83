"""A keyword no engine enforces, in a place an instance need not reach: the grammar never writes that place
(the schema was refused before), every finished random walk validates with `jsonschema`, and where every
instance must reach the keyword the refusal stays, naming it."""

import json

import jsonschema
import pytest
from grammar_walk import check_compiled

from radixlm.constrained.backend import GrammarError
from radixlm.constrained.one_of import fails, restricted
from radixlm.constrained.schema_audit import first_issue, resolve
from radixlm.constrained.schema_leave_out import leave_out

PACKER = {"oneOf": [  # JSONSchemaStore packer.json's provisioners: an ansible output is also a valid shell one
    {"type": "object", "properties": {"playbook_file": {"type": "string"}, "type": {"enum": ["shell", "ansible"]}},
     "required": ["playbook_file", "type"]},
    {"type": "object", "properties": {"inline": {"type": "array", "items": {"type": "string"}},
                                      "type": {"enum": ["shell", "ansible"]}}, "required": ["type"]}]}

# (schema, valid instances the grammar takes, instances it must refuse)
NARROWED = [
    ({"type": "object", "properties": {"name": {"type": "string", "not": {"enum": ["x"]}}, "age": {"type": "integer"}},
      "required": ["age"]}, [{"age": 1}], [{"age": 1, "name": "y"}, {}]),
    ({"anyOf": [{"type": "string", "not": {"const": "a"}}, {"type": "integer"}]}, [3], ["b", "a"]),
    (PACKER, [{"type": "shell"}, {"inline": ["ls"], "type": "shell"}],
     [{"type": "shell", "playbook_file": "p"}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"not": {"type": "string", "pattern": "^x"}}},
     [{"a": 1}, {}], [{"b": 1}]),
    ({"type": "object", "properties": {"xs": {"type": "array", "items": {"not": {"type": "string", "pattern": "^x"}}}},
      "required": ["xs"]}, [{"xs": []}], [{"xs": [1]}]),
]

STILL_REFUSED = [
    ({"type": "object", "properties": {"name": {"type": "string", "not": {"enum": ["x"]}}}, "required": ["name"]},
     "'not'", "/properties/name/not"),
    ({"type": "object", "properties": {"name": {"type": "string", "not": {"enum": ["x"]}}},
      "additionalProperties": True}, "'not'", "/properties/name/not"),   # the name could come back as another
    ({"type": "array", "items": {"not": {"type": "string", "pattern": "^x"}}, "minItems": 1}, "'not'", "/items/not"),
    ({"type": "object", "additionalProperties": {"not": {"type": "string", "pattern": "^x"}}, "minProperties": 1}, "'not'",
     "/additionalProperties/not"),        # closed, it could hold no name at all
]


@pytest.fixture(scope="module")
def backends():
    from tiny_models import make_tiny_tokenizer

    from radixlm.constrained.backend import GrammarBackend

    tok = make_tiny_tokenizer()
    made = {e: GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=e, timeout_s=30) for e in ("xgrammar", "auto")}
    yield tok, made
    for b in made.values():
        b.shutdown()


@pytest.mark.parametrize("engine", ["xgrammar", "auto"])
@pytest.mark.parametrize("schema,accepted,refused", NARROWED,
                         ids=["optional-property", "anyOf-branch", "oneOf-exclusive-branch", "additionalProperties",
                              "items"])
def test_a_place_an_instance_may_leave_out_is_never_written(backends, engine, schema, accepted, refused):
    tok, made = backends
    check_compiled(made[engine], tok, schema, accepted, refused)


@pytest.mark.parametrize("schema,keyword,pointer", STILL_REFUSED, ids=["required", "open-object", "non-empty",
                                                                         "min-properties"])
def test_a_keyword_every_instance_may_reach_is_still_refused(backends, schema, keyword, pointer):
    for backend in backends[1].values():
        with pytest.raises(GrammarError) as info:
            backend.compile(("json", json.dumps(schema)), timeout=60)
        assert keyword in str(info.value) and pointer in str(info.value)


def test_a_left_out_property_is_still_read_as_written_by_a_oneOf_proof():
    """Left out for the grammar, `a` is still allowed by the branch as written: {"a": 1} from the other branch
    validates it too, so the proof must not count the branch as closed to `a`."""
    written = {"type": "object", "properties": {"a": {"not": {"type": "string", "pattern": "^x"}}},
               "additionalProperties": False}
    other = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
             "additionalProperties": False}
    root = {"$defs": {"w": json.loads(json.dumps(written))}}
    assert leave_out(root, first_issue(root), resolve) == "left out the optional property 'a'"
    narrowed = root["$defs"]["w"]
    assert "a" not in narrowed["properties"] and restricted(narrowed, "properties")
    assert not fails(other, narrowed, root, resolve)
    assert jsonschema.Draft202012Validator(written).is_valid({"a": 1})


def test_llguidance_does_not_take_a_oneOf_whose_outputs_may_validate_two_branches():
    """llguidance proves PACKER's oneOf exact by reading the shell branch as closed to `playbook_file`; as written
    it is open, so an ansible output validates both (this was an answer under `--grammar-backend llguidance`)."""
    from tiny_models import make_tiny_tokenizer

    from radixlm.constrained.backend import GrammarBackend

    both = {"playbook_file": "p", "type": "shell"}
    assert all(jsonschema.Draft202012Validator(b).is_valid(both) for b in PACKER["oneOf"])
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="llguidance", timeout_s=30)
    try:
        with pytest.raises(GrammarError) as info:
            backend.compile(("json", json.dumps(PACKER)), timeout=60)
        assert "'oneOf'" in str(info.value) and "/oneOf" in str(info.value)
    finally:
        backend.shutdown()
