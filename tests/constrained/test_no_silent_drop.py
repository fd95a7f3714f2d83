"""Keywords XGrammar drops silently, one test each: the old behaviour (XGrammar compiles the schema and
its matcher accepts an instance that violates it, per `jsonschema`) is asserted first, so each case
is a real drop; then the backend must refuse the schema with a message naming the keyword and its
JSON pointer, or compile a grammar that refuses the instance.  Under `auto`, llguidance takes the
schemas it enforces whole."""

import json

import jsonschema
import pytest
import xgrammar as xgr
from grammar_walk import accepts_text, check_compiled
from tiny_models import make_tiny_tokenizer
from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

from radixlm.constrained.backend import GrammarBackend, GrammarError

# (schema, an instance that violates it, what the refusal names: keyword and pointer; None: enforced)
DROPS = [
    ({"type": "object", "properties": {"year": {"type": "string", "maxLength": 4, "pattern": "/^[0-9]{4}$/"}}},
     {"year": "/2001/"}, ("'pattern'", "/properties/year/pattern", "cannot all hold")),
    ({"type": "object", "properties": {"name": {"type": "string"}},
      "anyOf": [{"required": ["data_type"]}, {"required": ["kind"]}]},
     {"name": "x"}, None),
    ({"type": "string", "pattern": "^[0-9]+$", "maxLength": 4}, "12345", None),
    ({"type": "string", "pattern": "^[a-z]+[0-9]$", "maxLength": 3}, "abcd1", None),   # ^[a-z]{1,2}[0-9]$
    ({"type": "string", "pattern": "^[a-z]+[0-9]+$", "maxLength": 3}, "abcd1", ("'maxLength'", "/maxLength", "")),
    ({"type": "string", "pattern": "^[0-9]{6}$", "maxLength": 4}, "123456", ("'maxLength'", "/maxLength",
                                                                              "cannot all hold")),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 1], None),
    # a format beside a pattern: XGrammar wrote the format and dropped the pattern (JSON Schema Store's
    # schema-catalog.json: "feedingCraashesDep:" for a url that must start with https://)
    ({"type": "string", "format": "uri", "pattern": "^https://[a-z]+\\.org$"}, "ab:", None),
    ({"type": "string", "format": "email", "pattern": "^[a-z]+@x\\.org$"}, "a@b.com", None),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 2}, [1, 1],
     ("'uniqueItems'", "/uniqueItems", "")),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}, "required": ["a"]}, {"a": None},
     None),   # the other six types (constrained/negation.py)
    ({"type": "object", "properties": {"a": {"not": {"type": "string", "pattern": "^x"}}}, "required": ["a"]},
     {"a": "xy"}, ("'not'", "/properties/a/not", "")),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, {"a": None}, None),   # `a` never written
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}}, {"a": 1}, None),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False, "required": ["a"],
      "dependentRequired": {"a": ["b"]}}, {"a": 1}, ("'dependentRequired'", "/dependentRequired", "")),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}}}}, {"a": 1, "b": 1}, None),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"a": 1, "b": 2}, None),
    ({"$defs": {"t": {"type": "array", "items": {"type": "integer"}}},
      "type": "object", "properties": {"p": {"$ref": "#/$defs/t", "maxItems": 1}}}, {"p": [1, 2]}, None),
    ({"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "integer"}}, ["a"],
     ("'contains'", "/contains", "")),
    ({"type": "number", "multipleOf": 0.5}, 0.3, None),         # written as integers
    ({"type": "number", "multipleOf": 0.3}, 0.5, ("'multipleOf'", "/multipleOf", "")),
    # XGrammar drops an integer's multipleOf beside any bound (Github_trivial o83695: minimum 0, multipleOf 12,
    # answered 1000 on a fresh sample)
    ({"type": "integer", "minimum": 0, "multipleOf": 12}, 1000, ("'multipleOf'", "/multipleOf", "")),
    ({"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 0}]}, 5, ("'oneOf'", "/oneOf", "")),
    ({"$defs": {"p": {"type": "object", "properties": {"t": {"type": "string", "minLength": 2, "pattern": "^a"}},
                      "required": ["t"]}},
      "$ref": "#/$defs/p"}, {"t": "a"}, ("'minLength'", "/$defs/p/properties/t/minLength", "")),
    ({"maxLength": 2}, "abc", None),
    ({"type": "object", "patternProperties": {"^(([a-z]{2})(-x(-[a-z]{1,8})+)?|cd)$": {"type": "string"}},
      "additionalProperties": False}, {"abzz": "a"}, None),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "if": {"required": ["a"]}, "then": {"required": ["b"]}}, {"a": 1}, None),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "if": {"properties": {"a": {"type": "string"}}},
      "then": {"required": ["b"]}, "else": {"required": ["c"]}}, {"a": 1}, None),   # the then path: `a` is never
    # written (no value is both an integer and a string), `b` always
    # XGrammar writes an enum's (or const's) values whatever the pattern, lengths or bounds beside it say (an
    # allOf of JSONSchemaStore machine.schema.json merges such a node)
    ({"type": "string", "enum": ["atomic", "history", "final"], "pattern": "final"}, "history", None),
    ({"type": "object", "properties": {"t": {"type": "string", "const": "history", "pattern": "final"}}},
     {"t": "history"}, None),
    ({"type": "integer", "enum": [1, 5, 10], "minimum": 2}, 1, None),
    ({"type": "string", "enum": ["ab", "abcd"], "maxLength": 3}, "abcd", None),
    # XGrammar writes a declared name whatever propertyNames says, and ignores propertyNames beside
    # patternProperties (JSONSchemaStore conjure.schema.json wrote the error name "")
    ({"type": "object", "properties": {"ab": {"type": "integer"}}, "propertyNames": {"pattern": "^[A-Z]"}},
     {"ab": 1}, None),
    ({"type": "object", "properties": {"ab": {"type": "integer"}}, "required": ["ab"],
      "propertyNames": {"pattern": "^[A-Z]"}}, {"ab": 1}, ("'propertyNames'", "/propertyNames", "cannot all hold")),
    ({"type": "object", "additionalProperties": False, "propertyNames": {"pattern": "^[A-Z][a-z]+$"},
      "patternProperties": {"": {"type": "integer"}}}, {"": 1}, None),
    ({"type": "object", "additionalProperties": False, "propertyNames": {"pattern": "^[A-Z][a-z]+$"},
      "patternProperties": {"^a": {"type": "integer"}}}, {"a": 1}, ("'propertyNames'", "/propertyNames", "")),
]


@pytest.mark.parametrize("schema,bad,named", DROPS, ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else "")
def test_dropped_keyword_is_enforced_or_refused(tiny, schema, bad, named):
    tok, backends = tiny
    text = json.dumps(bad)
    assert not jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema).is_valid(bad)
    assert xgr_accepts(xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False), text), \
        "the old behaviour: XGrammar alone accepts the violating instance"
    backend = backends["xgrammar"]
    try:
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    except GrammarError as exc:
        assert named is not None, f"refused although enforceable: {exc}"
        keyword, pointer, extra = named
        assert keyword in str(exc) and f"at {pointer}" in str(exc) and extra in str(exc), str(exc)
        return
    assert named is None, "compiled although it cannot be enforced"
    assert not accepts_text(backend.matcher(compiled), tok, text, tok.eos_token_id)


def test_auto_takes_llguidance_for_what_xgrammar_drops(tiny):
    tok, backends = tiny
    schema = {"type": "string", "pattern": "^[a-z]+[0-9]+$", "maxLength": 3}
    compiled = backends["auto"].compile(("json", json.dumps(schema)), timeout=60)
    assert compiled.engine == "llguidance"
    m = backends["auto"].matcher
    assert accepts_text(m(compiled), tok, '"ab1"', tok.eos_token_id)
    assert not accepts_text(m(compiled), tok, '"abc1"', tok.eos_token_id)
    plain = backends["auto"].compile(("json", json.dumps({"type": "integer"})), timeout=60)
    assert plain.engine == "xgrammar"


@pytest.mark.parametrize("pattern,what", [(r"^\s*<([A-Za-z]+).+?(\/>|\/\1>)\s*$", "a backreference"),
                                          (r"^(?!www\.)[a-z.]+$", "a lookaround")])
def test_a_pattern_no_grammar_can_hold_is_refused_naming_it(tiny, pattern, what):
    """Github_hard o75605's HTML-tag pattern matches a closing tag to its opening one (`\1`): no engine takes it,
    and the 400 names the keyword, its pointer and why (it named none)."""
    _, backends = tiny
    schema = {"type": "object", "properties": {"html": {"type": "string", "pattern": pattern}}, "required": ["html"]}
    for engine in ("xgrammar", "auto"):
        with pytest.raises(GrammarError, match=f"'pattern' at /properties/html/pattern .*{what}"):
            backends[engine].compile(("json", json.dumps(schema)), timeout=60)


def test_auto_still_refuses_what_cannot_hold_or_nobody_enforces(tiny):
    _, backends = tiny
    with pytest.raises(GrammarError, match="cannot all hold"):
        backends["auto"].compile(("json", json.dumps(DROPS[0][0])), timeout=60)
    with pytest.raises(GrammarError, match="'uniqueItems' at /uniqueItems.*llguidance refused it too"):
        unique = next(s for s, _, named in DROPS if named and named[0] == "'uniqueItems'")
        backends["auto"].compile(("json", json.dumps(unique)), timeout=60)


def test_properties_named_like_keywords_are_not_read_as_keywords():
    """A property called items, pattern or properties is a name in a map, not a keyword: the schema compiles
    (it was refused: the map itself was normalised as a schema) and an instance with those names validates."""
    from radixlm.constrained.schema_normalize import normalize_schema
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}},
                                               "pattern": {"type": "string"}, "properties": {"type": "object"}},
              "required": ["items", "pattern"]}
    out = normalize_schema(schema)
    assert set(out["properties"]) == {"items", "pattern", "properties"} and "type" not in out["properties"]
    assert out["properties"]["pattern"]["type"] == "string"


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_no_raw_control_character_in_a_long_bounded_string(engine):
    """XGrammar's rule for a string with maxLength (over the 32 that are rewritten as a pattern) accepted raw
    control characters, so a finished answer was not JSON (dev schema Github_medium__o55355).  A JSON grammar's
    masks now leave out every token holding a byte below 0x20: the matcher refuses one inside the string, and
    the filled row has its bit clear (oracle: the token's own bytes)."""
    import torch

    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine, timeout_s=30)
    try:
        pieces = backend.tokenizer_info.decoded_vocab
        control = [i for i, p in enumerate(pieces[:len(tok)]) if p and any(b < 0x20 for b in p)]
        letter = next(i for i, p in enumerate(pieces) if p == b"a")
        quote = next(i for i, p in enumerate(pieces) if p == b'"')
        assert control, "the tokenizer has no token with a control character: the test proves nothing"
        m = backend.matcher(backend.compile(("json", '{"type": "string", "maxLength": 100}'), timeout=60))
        assert m.accept_token(quote) and m.accept_token(letter)
        mask = torch.zeros((1, (len(tok) + 31) // 32), dtype=torch.int32)
        m.fill_bitmask(mask, 0)
        bit = lambda t: (int(mask[0, t >> 5]) >> (t & 31)) & 1   # noqa: E731
        assert bit(letter) and not any(bit(t) for t in control)
        assert not any(m.accept_token(t) for t in control[:50])
    finally:
        backend.shutdown()


def test_draft7_tuple_items_are_prefix_items(tiny):
    """`items: [...]` + `additionalItems` (draft 7, which XGrammar rejects) compile as prefixItems + items."""
    tok, backends = tiny
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}],
              "additionalItems": {"type": "string"}}
    validator = jsonschema.Draft7Validator(schema)
    for engine, backend in backends.items():
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
        for instance in ([1, "a", "b"], [1], [1, 2], ["a"]):
            got = accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
            assert got == validator.is_valid(instance) or (engine == "xgrammar" and not got and instance == [1]), \
                (engine, instance)


ALL_OF_REFS = [
    # JSON Schema Store's way of typing a property: annotations beside a one-reference allOf (was refused)
    ({"definitions": {"c": {"type": "string", "enum": ["MyCode", "LibraryCode"]}}, "type": "object",
      "properties": {"e": {"description": "d", "default": "MyCode", "allOf": [{"$ref": "#/definitions/c"}]}},
      "required": ["e"]},
     [{"e": "MyCode"}, {"e": "LibraryCode"}, {"e": "x"}, {"e": 1}, {}]),
    # a referenced object and a choice of required names: A and (B1 or B2) as (A and B1) or (A and B2)
    ({"definitions": {"t": {"type": "object", "properties": {"script": {"type": "string"}, "extends": {"type": "string"},
                                                              "stage": {"type": "string"}}, "additionalProperties": False}},
      "type": "object", "required": ["job"],
      "properties": {"job": {"allOf": [{"$ref": "#/definitions/t"},
                                       {"anyOf": [{"required": ["script"]}, {"required": ["extends"]}]}]}}},
     [{"job": {"script": "a"}}, {"job": {"extends": "b", "stage": "s"}}, {"job": {"script": "a", "extends": "b"}},
      {"job": {"stage": "s"}}, {"job": {}}, {"job": {"script": "a", "x": 1}}, {"job": {"script": 1}}]),
]


@pytest.mark.parametrize("schema,instances", ALL_OF_REFS, ids=["annotated-ref", "ref-and-choice"])
def test_all_of_with_references_compiles_and_holds(tiny, schema, instances):
    """allOf parts that are references are inlined so they merge, and one anyOf part is distributed over the
    others: XGrammar compiles the schema (it was refused) and its matcher accepts exactly the instances
    `jsonschema` calls valid (keys in the schema's order, as XGrammar writes them)."""
    tok, backends = tiny
    backend = backends["xgrammar"]
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    assert any(validator.is_valid(i) for i in instances) and not all(validator.is_valid(i) for i in instances)
    for instance in instances:
        got = accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
        assert got == validator.is_valid(instance), instance


OVERLAPPING_PATTERNS = [
    # a pattern that governs the declared names too (WashingtonPost's `^[a-zA-Z0-9_]*`): merged into each of
    # them; `redirect`, whose two schemas do not merge and which is optional, is never written
    ({"type": "object", "required": ["by"],
      "properties": {"by": {"title": "By", "type": "array", "items": {"type": "integer"}},
                     "redirect": {"type": "array", "items": {"type": "string"}}},
      "patternProperties": {"^[a-z]*": {"type": "array", "items": {"type": "integer"}}}},
     [{"by": [1, 2]}, {"by": []}],
     [{"by": ["a"]}, {"by": [1], "redirect": ["a"]}, {}, {"by": [1], "zz": [2]}]),
    # two patterns (localized variants of declared names, as in OCDS): the object keeps its declared names
    ({"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}},
      "patternProperties": {"^title_[a-z]{2}$": {"type": "string"}, "^description_[a-z]{2}$": {"type": ["string", "null"]}}},
     [{"title": "a"}],
     [{"title": 1}, {"title": "a", "title_fr": "b"}, {"description_fr": None}]),
]


@pytest.mark.parametrize("schema,accepted,refused", OVERLAPPING_PATTERNS, ids=["pattern-over-names", "two-patterns"])
def test_overlapping_pattern_properties_compile_as_a_restriction(tiny, schema, accepted, refused):
    """patternProperties XGrammar cannot apply (they were refused) compile as the declared names, each with
    every schema that governs it, in a closed object: what the matcher accepts is valid under `jsonschema`
    (some valid instances, with other names, are refused: a restriction)."""
    tok, backends = tiny
    check_compiled(backends["xgrammar"], tok, schema, accepted, refused, walks=0)


def test_a_property_whose_schema_is_false_is_left_out_of_a_closed_object(tiny):
    """`"name": false` (JSON Schema Store's hugo.json has one) made XGrammar refuse the schema; in a closed object
    the name is simply never written, which is exact."""
    tok, backends = tiny
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "additionalProperties": False}
    compiled = backends["xgrammar"].compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in ({"a": 1}, {}, {"a": 1, "b": 2}, {"b": 2}):
        got = accepts_text(backends["xgrammar"].matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
        assert got == validator.is_valid(instance), instance


def test_auto_takes_llguidance_when_xgrammar_cannot_build_what_the_audit_let_through(tiny):
    """XGrammar rejects an open object with minProperties (its strict mode closes it); `auto` answers with
    llguidance instead of a 400, `xgrammar` refuses with XGrammar's message."""
    tok, backends = tiny
    schema = json.dumps({"type": "object", "minProperties": 1})
    with pytest.raises(GrammarError, match="minProperties"):
        backends["xgrammar"].compile(("json", schema), timeout=60)
    compiled = backends["auto"].compile(("json", schema), timeout=60)
    assert compiled.engine == "llguidance"
    assert not accepts_text(backends["auto"].matcher(compiled), tok, "{}", tok.eos_token_id)


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
@pytest.mark.parametrize("pattern,value", [(r"^\\d+/\\d+$", "\\dd/\\d"), (r'^a"b+$', 'a"bb'), (r"^x\\+y$", "x\\y")])
def test_a_literal_backslash_or_quote_in_a_pattern_is_written_escaped(engine, pattern, value):
    """XGrammar matched a pattern against the JSON text character for character, so a literal backslash or quote
    was written raw and the finished answer was not JSON (JSONSchemaBench o36798 answered `"\\d/\\d/\\d"`): the
    matcher takes the escaped text and refuses the raw one, on both engines."""
    import re

    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine)
    try:
        compiled = backend.compile(("json", json.dumps({"type": "string", "pattern": pattern})), timeout=60)
        assert re.search(pattern, value)
        assert accepts_text(backend.matcher(compiled), tok, json.dumps(value), tok.eos_token_id)
        raw = '"' + value + '"'
        assert not accepts_text(backend.matcher(compiled), tok, raw, tok.eos_token_id)
        with pytest.raises(ValueError):
            json.loads(raw)
    finally:
        backend.shutdown()


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_a_bracket_inside_a_class_is_a_plain_character(engine):
    """JSON Schema reads patterns as ECMA-262 (jsonschema as Python's `re`): `[` inside a class is a character.
    llguidance reads classes as Rust's regex, where it opens a nested class, so Github_medium o58776's
    `^[[a-z]*[-]?[a-z]*]*$` took "--" and "union?"; `&&` inside a class is an intersection there."""
    import re

    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine)
    try:
        for pattern, values in (("^[[a-z]*[-]?[a-z]*]*$", ["[ab-c]]", "ab", "--", "union?"]),
                                ("^[a&&b]+$", ["a&b", "&&", "ab", "c"])):
            compiled = backend.compile(("json", json.dumps({"type": "string", "pattern": pattern})), timeout=60)
            for value in values:
                got = accepts_text(backend.matcher(compiled), tok, json.dumps(value), tok.eos_token_id)
                assert got == bool(re.search(pattern, value)), (pattern, value)
        compiled = backend.compile(("regex", "[[a-z]*[-]?[a-z]*]*"), timeout=60)   # a regex request, read the same
        for value in ("[ab-c]]", "ab", "--", "a[b"):
            got = accepts_text(backend.matcher(compiled), tok, value, tok.eos_token_id)
            assert got == bool(re.fullmatch("[[a-z]*[-]?[a-z]*]*", value)), value
    finally:
        backend.shutdown()


def test_an_integer_multiple_of_is_not_given_bounds_xgrammar_would_drop_it_for(tiny):
    """The int64 bounds that end numbers made XGrammar drop an integer's `multipleOf` (it keeps it only where no
    bound is given), so {"multipleOf": 12} took 7; under `auto` a bounded one goes to llguidance."""
    tok, backends = tiny
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 12}}, "required": ["n"],
              "additionalProperties": False}
    check_compiled(backends["xgrammar"], tok, schema, [{"n": 24}, {"n": 0}, {"n": -36}], [{"n": 7}, {"n": 1000}])
    bounded = {**schema, "properties": {"n": {"type": "integer", "multipleOf": 12, "minimum": 0}}}
    compiled = backends["auto"].compile(("json", json.dumps(bounded)), timeout=60)
    assert compiled.engine == "llguidance"
    check_compiled(backends["auto"], tok, bounded, [{"n": 24}, {"n": 0}], [{"n": 1000}, {"n": -12}])


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_a_number_multiple_of_a_fraction_is_written_as_integers_every_validator_accepts(engine):
    """Github_medium o46423's amounts (`multipleOf: 0.01`): llguidance wrote -20362.96, an exact multiple that
    jsonschema refuses (it divides in floating point: 2036295.9999999998), and XGrammar refused the schema.
    Integers are multiples of 1/n that every validator agrees on, so both engines write those, within the
    bounds (0.2 to 50 as 1 to 50), and every finished walk validates."""
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine)
    schema = {"type": "object", "properties": {"net": {"type": "number", "multipleOf": 0.01, "minimum": -99999.99},
                                               "due": {"type": ["number", "null"], "multipleOf": 0.01,
                                                       "minimum": 0.2, "maximum": 50}},
              "required": ["net", "due"], "additionalProperties": False}
    try:
        check_compiled(backend, tok, schema, [{"net": -20362, "due": 1}, {"net": 7, "due": None}],
                       [{"net": -20362.96, "due": 1}, {"net": 1, "due": 0}, {"net": 1, "due": 51}], walks=60)
    finally:
        backend.shutdown()


def test_an_optional_trigger_of_a_closed_object_is_left_out_rather_than_its_schema_applied_always(tiny):
    """WashingtonPost's reference: `website` requires `type: section`.  Applying that always made every `type`
    "section", so a part asking for "site" (primary_site's allOf) did not merge and the schema was refused;
    leaving the optional `website` out merges, and the matcher takes exactly what `jsonschema` calls valid
    among these (every instance without `website`)."""
    tok, backends = tiny
    referent = {"type": "object", "additionalProperties": False, "required": ["id"],
                "properties": {"id": {"type": "string"}, "type": {"type": "string"}, "website": {"type": "string"}},
                "dependencies": {"website": {"properties": {"type": {"enum": ["section"]}}}}}
    schema = {"type": "object", "properties": {"ref": {"allOf": [
        referent, {"properties": {"type": {"enum": ["site"]}}}]}}, "required": ["ref"]}
    compiled = backends["xgrammar"].compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance, taken in (({"ref": {"id": "a", "type": "site"}}, True), ({"ref": {"id": "a"}}, True),
                            ({"ref": {"id": "a", "type": "section"}}, False),
                            ({"ref": {"id": "a", "type": "site", "website": "w"}}, False)):
        got = accepts_text(backends["xgrammar"].matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
        assert got == taken and (validator.is_valid(instance) or not got), instance


MERGES = [
    # `not: {required: [b]}`: b never written (it was refused as negation)
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "not": {"required": ["b"]}},
     [{"a": 1}, {}], [{"a": 1, "b": 2}, {"b": 1}]),
    # not both: one of them left out
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "not": {"required": ["a", "b"]}}, [{"a": 1}, {"b": 2}, {}], [{"a": 1, "b": 2}]),
    # an allOf part that forbids a name keeps forbidding it once merged
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "allOf": [{"properties": {"b": False}}]}, [{"a": 1}], [{"a": 1, "b": 2}]),
    # nswag: an optional name typed boolean in one part and string in the other is valid under neither
    ({"type": "object", "properties": {"x": {"type": "boolean"}, "y": {"type": "string"}},
      "allOf": [{"type": "object", "properties": {"x": {"type": "string"}, "z": {"type": "integer"}}}]},
     [{"y": "a", "z": 1}, {}], [{"x": True}, {"x": "s"}]),
    # `additionalProperties: true` beside an allOf part with properties (Github o68444's Locatable)
    ({"type": "object", "additionalProperties": True,
      "allOf": [{"type": "object", "additionalProperties": True, "properties": {"street": {"type": "string"}}}]},
     [{"street": "a"}, {}], [{"street": 1}]),
    # `additionalProperties: {}` beside an anyOf of references (WashingtonPost wp_29) says nothing; it is not pushed
    # beside each branch's $ref
    ({"$defs": {"a": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                      "additionalProperties": False},
                "b": {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"],
                      "additionalProperties": False}},
      "type": "object", "additionalProperties": {}, "anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]},
     [{"x": 1}, {"y": "s"}], [{"x": "s"}, {}]),
    # an enum beside a oneOf whose branches narrow it (Github_hard o21169's promotions): the values of both
    ({"type": "object", "additionalProperties": False,
      "properties": {"category": {"enum": ["a", "b"]}, "url": {"type": "string"}},
      "oneOf": [{"properties": {"category": {"enum": ["a"]}}, "required": ["url"]},
                {"properties": {"category": {"enum": ["b"]}}, "required": ["url"]}]},
     [{"category": "a", "url": "u"}, {"category": "b", "url": "v"}], [{"url": "u"}, {"category": "c", "url": "u"}]),
    # keywords beside a $ref to a oneOf (CircleCI's executors): pushed into its branches once inlined
    ({"$defs": {"choice": {"oneOf": [
        {"type": "object", "properties": {"docker": {"type": "string"}}, "required": ["docker"]},
        {"type": "object", "properties": {"machine": {"type": "boolean"}}, "required": ["machine"]}]}},
      "type": "object", "properties": {"ex": {"type": "object", "$ref": "#/$defs/choice",
                                              "properties": {"shell": {"type": "string"}}}}},
     [{"ex": {"docker": "d", "shell": "s"}}, {"ex": {"machine": True}}],
     [{"ex": {"shell": "s"}}, {"ex": {"docker": "d", "shell": 1}}]),
    # an enum of strings beside a $ref to (string or object): the object branch can match nothing, and is left
    # out (briefcase's secrettype)
    ({"$defs": {"property": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"key": {"type": "string"}}}]}},
      "type": "object", "properties": {"secrettype": {"$ref": "#/$defs/property", "enum": ["key", "sas"]}}},
     [{"secrettype": "key"}, {}], [{"secrettype": "x"}, {"secrettype": {"key": "a"}}]),
    # an allOf part whose reference is itself an allOf (the Debug Adapter Protocol's events: an InitializedEvent
    # is an Event is a ProtocolMessage), each reference inlined so all the parts merge
    ({"$defs": {"msg": {"type": "object", "properties": {"seq": {"type": "integer"},
                                                         "type": {"type": "string", "enum": ["request", "event"]}},
                        "required": ["seq", "type"]},
                "event": {"allOf": [{"$ref": "#/$defs/msg"}, {"type": "object", "required": ["event"], "properties": {
                    "type": {"enum": ["event"]}, "event": {"type": "string"}}}]}},
      "allOf": [{"$ref": "#/$defs/event"}, {"type": "object", "properties": {"event": {"enum": ["initialized"]}}}]},
     [{"seq": 1, "type": "event", "event": "initialized"}],
     [{"seq": 1, "type": "request", "event": "initialized"}, {"seq": 1, "type": "event", "event": "stopped"},
      {"type": "event", "event": "initialized"}]),
    # a part and a oneOf of references (Azure Data Factory's linked services): the part pushed into each branch
    ({"$defs": {"base": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
                "sql": {"type": "object", "properties": {"type": {"const": "sql"}, "conn": {"type": "string"}},
                        "required": ["type", "conn"]},
                "blob": {"type": "object", "properties": {"type": {"const": "blob"}, "sas": {"type": "string"}},
                         "required": ["type", "sas"]}},
      "type": "object", "allOf": [{"$ref": "#/$defs/base"}, {"oneOf": [{"$ref": "#/$defs/sql"}, {"$ref": "#/$defs/blob"}]}]},
     [{"type": "sql", "conn": "c", "name": "n"}, {"type": "blob", "sas": "s", "name": "n"}],   # in the order written
     [{"type": "sql", "conn": "c"}, {"type": "sql", "sas": "s", "name": "n"}]),
    # `$schema` beside a `$ref` (JSON Schema Store's func_yaml) names a dialect; it does not constrain
    ({"$defs": {"inv": {"type": "string", "enum": ["a", "b"]}}, "type": "object",
      "properties": {"i": {"$schema": "http://json-schema.org/draft-04/schema#", "$ref": "#/$defs/inv"}}},
     [{"i": "a"}, {}], [{"i": "c"}]),
]


@pytest.mark.parametrize("schema,accepted,refused", MERGES,
                         ids=["not-required", "not-both-required", "false-part", "conflicting-optional", "open-parts",
                              "open-beside-refs", "enum-beside-one-of", "beside-ref-to-one-of", "dead-branch",
                              "nested-all-of-refs", "part-and-one-of-refs", "dialect-beside-ref"])
def test_negated_names_and_conflicting_parts_merge(tiny, schema, accepted, refused):
    """These were refused on XGrammar (negation, an allOf that did not merge); they compile, the matcher takes
    the valid instances listed and refuses the others, and each one it takes is valid under `jsonschema`."""
    tok, backends = tiny
    compiled = backends["xgrammar"].compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in accepted + refused:
        got = accepts_text(backends["xgrammar"].matcher(compiled), tok, json.dumps(instance), tok.eos_token_id)
        assert got == (instance in accepted), instance
        assert validator.is_valid(instance) or not got, instance


@pytest.mark.parametrize("schema,accepted,refused", [
    # Azure Data Factory's names (Github_ultra o358): one leading character, then up to 259 more
    ({"type": "string", "maxLength": 6, "pattern": "^[A-Za-z0-9_][^<>*#.%&:\\\\+?/]*$"}, ["a", "a-b c!"],
     ["a-b c!x", "-a", "a.b"]),
    # a pattern written inside a group (Github_hard o2045)
    ({"type": "string", "maxLength": 4, "pattern": "(^[a-zA-Z0-9_.()-]+$)"}, ["a.b", "(ab)"], ["abcde", "", "a b"]),
    # a repeated group: lengths 2k + 1
    ({"type": "string", "minLength": 2, "maxLength": 6, "pattern": "^(ab)*c$"}, ["abc", "ababc"], ["c", "abababc"]),
], ids=["leading-class", "grouped", "repeated-group"])
def test_a_length_bound_folds_into_the_one_repeated_part_of_a_pattern(tiny, schema, accepted, refused):
    """A pattern whose length varies through one repeated part takes minLength/maxLength as that part's count
    (they were refused as a bound the pattern does not imply); the matcher takes exactly what `jsonschema`
    calls valid among these."""
    tok, backends = tiny
    compiled = backends["xgrammar"].compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for value in accepted + refused:
        got = accepts_text(backends["xgrammar"].matcher(compiled), tok, json.dumps(value), tok.eos_token_id)
        assert got == (value in accepted) == validator.is_valid(value), value


def test_an_enum_merged_with_a_pattern_keeps_only_the_values_it_admits(tiny):
    """JSONSchemaStore machine.schema.json: each state node is the base node (`type` in an enum of five) merged
    with a part whose `type` has a pattern; XGrammar writes every enum value whatever the pattern says, so
    {"type": "history"} came out of the `final` node."""
    tok, backends = tiny
    schema = {"type": "object", "allOf": [{"properties": {"type": {"type": "string", "enum": ["history", "final"]}},
                                           "required": ["type"]},
                                          {"properties": {"type": {"type": "string", "pattern": "final"}}}]}
    compiled = backends["xgrammar"].compile(("json", json.dumps(schema)), timeout=60)
    matcher = backends["xgrammar"].matcher
    assert accepts_text(matcher(compiled), tok, '{"type": "final"}', tok.eos_token_id)
    assert not accepts_text(matcher(compiled), tok, '{"type": "history"}', tok.eos_token_id)
    assert not jsonschema.Draft202012Validator(schema).is_valid({"type": "history"})


def test_a_closed_node_is_not_pushed_beside_a_referenced_branch(tiny):
    """`additionalProperties: false` beside a `oneOf` of references closes the node on its own (no) properties;
    pushed beside each `$ref` it closed each referenced object on that object's properties instead, and
    {"two": 1}, valid under both branches and so not under `oneOf`, came out (Github_medium o90967).  Here
    no value of `parts` is valid: it is never written."""
    tok, backends = tiny
    schema = {"definitions": {"one": {"properties": {"one": {"type": "string"}}},
                              "two": {"properties": {"two": {"type": "integer"}}}},
              "type": "object", "properties": {
                  "a": {"type": "integer"},
                  "parts": {"oneOf": [{"$ref": "#/definitions/one"}, {"$ref": "#/definitions/two"}],
                            "additionalProperties": False}}}
    check_compiled(backends["xgrammar"], tok, schema, [{}, {"a": 1}],
                   [{"parts": {"two": 1}}, {"parts": {"one": "x"}}, {"parts": {}}, {"a": 1, "parts": 3}])


def test_a_format_llguidance_does_not_know_only_annotates():
    """llguidance refused a whole schema for a `format` it does not know (JsonSchemaStore chutzpah.json's
    `regex`); such a format only annotates (no validator asserts it by default) and is passed over, as XGrammar
    passes it over, while the formats llguidance knows stay enforced, and a value that only looks like one
    (inside `enum`) is kept."""
    tok = make_tiny_tokenizer()
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine="llguidance")
    try:
        schema = {"type": "object", "required": ["p", "d"], "properties": {
            "p": {"type": "string", "format": "regex"}, "d": {"type": "string", "format": "date"},
            "e": {"enum": [{"format": "x"}]}}}
        compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
        for instance, ok in (({"p": "a+", "d": "2024-01-02"}, True), ({"p": "a+", "d": "soon"}, False),
                             ({"p": "a", "d": "2024-01-02", "e": {"format": "x"}}, True),
                             ({"p": "a", "d": "2024-01-02", "e": {}}, False)):
            assert accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id) == ok, instance
    finally:
        backend.shutdown()
