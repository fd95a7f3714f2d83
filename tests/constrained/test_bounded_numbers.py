"""Numbers that end: by default the grammar bounds integers to int64 and numbers to 17 significant
digits and an exponent of at most 308, for JSON schemas, tool-call arguments and Pydantic schemas.
Oracle: an adversarial random decoder that writes a digit whenever the grammar allows one finishes
(`stop`) on every schema, and its outputs validate with jsonschema; with `bounded_numbers=False` (the
old behaviour, --json-unbounded-numbers) the same decoder never finishes."""

import json
import random

import jsonschema
import pytest
from grammar_walk import accepts_text, walk
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend
from radixlm.runtime.openai.tool_calls import hermes
from radixlm.runtime.openai.tool_calls.base import Tool, ToolChoice

ORDER = {"type": "object", "properties": {"order_id": {"type": "integer", "minimum": 1}}, "required": ["order_id"],
         "additionalProperties": False}


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


@pytest.fixture(scope="module", params=[("xgrammar", True), ("llguidance", True), ("xgrammar", False)],
                ids=["xgrammar", "llguidance", "unbounded"])
def backend(request, tok):
    engine, bounded = request.param
    b = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine, bounded_numbers=bounded)
    yield b
    b.shutdown()


def digits(tok):
    texts = [tok.decode([i]) for i in range(len(tok))]
    return {i for i, t in enumerate(texts) if t and all(c in "0123456789" for c in t)}


def pydantic_schema():
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):      # numbers only: a string without maxLength stays unbounded
        model_config = pydantic.ConfigDict(extra="forbid")    # as the openai SDK's strict parse() sends it
        population: int
        area_km2: float
    return City.model_json_schema()


SCHEMAS = [ORDER, {"type": "number"}, {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 1},
           {"type": "integer"}]


@pytest.mark.parametrize("schema", SCHEMAS + ["pydantic"], ids=lambda s: json.dumps(s)[:30])
def test_a_digit_loving_decoder_closes_every_number(backend, tok, schema):
    schema = pydantic_schema() if schema == "pydantic" else schema
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    digit_ids, rng = digits(tok), random.Random(0)
    finished = 0
    for _ in range(3):
        ids, done = walk(backend.matcher(compiled), len(tok), rng, 160,
                         prefer=lambda allowed: [i for i in allowed if i in digit_ids], bias=0.97)
        if done:
            finished += 1
            jsonschema.validate(json.loads(tok.decode(ids[:-1])), schema)
    if backend.options.bounded_numbers:
        assert finished == 3
    elif "items" not in schema:       # (a one-sided range's "0." has at most 6 decimals even unbounded)
        assert finished == 0          # the old behaviour: digits until the length limit


BIG = "1" * 25
UNTYPED = [({"type": "object", "properties": {"id": {}}, "required": ["id"]}, '{"id": %s}', ['{"id": "x"}']),
           ({"type": "array", "minItems": 1}, '[1, %s]', ['[1, "a", null]']),
           ({"type": "object", "properties": {"api_key": {"type": "object", "properties": {}}}, "required": ["api_key"]},
            '{"api_key": {"x": %s}}', ['{"api_key": {}}'])]


@pytest.mark.parametrize("schema,bad,good", UNTYPED, ids=lambda s: json.dumps(s)[:30])
def test_an_untyped_value_is_bounded_too(backend, tok, schema, bad, good):
    """A value the schema leaves open (any JSON; llguidance also admits unnamed properties) gets the bounds
    of a typed number: llguidance wrote {", ": 123456789... to the length limit there."""
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    eos = tok.eos_token_id
    assert accepts_text(backend.matcher(compiled), tok, bad % "12", eos) or "api_key" in bad and \
        backend.options.engine == "xgrammar"             # XGrammar writes no unnamed property at all
    assert accepts_text(backend.matcher(compiled), tok, bad % BIG, eos) != backend.options.bounded_numbers or \
        ("api_key" in bad and backend.options.engine == "xgrammar")
    for text in good:
        assert accepts_text(backend.matcher(compiled), tok, text, eos)


def test_tool_call_with_an_integer_argument_ends(tok):
    """tool_choice naming lookup_order: the structural tag's integer is bounded too."""
    b = GrammarBackend(tok, len(tok), {tok.eos_token_id})
    try:
        tool = Tool("lookup_order", ORDER)
        tag = hermes.constraint([tool], ToolChoice("named", "lookup_order"))
        compiled = b.compile(("structural_tag", tag), timeout=60)
        digit_ids, rng = digits(tok), random.Random(1)
        for _ in range(3):
            ids, done = walk(b.matcher(compiled), len(tok), rng, 200,
                             prefer=lambda allowed: [i for i in allowed if i in digit_ids], bias=0.97)
            assert done
            text = tok.decode(ids[:-1])
            args = json.loads(text[text.index("{"):text.rindex("}") + 1])["arguments"]
            assert 1 <= args["order_id"] < 2 ** 63
    finally:
        b.shutdown()


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_the_bounds(tok, engine):
    b = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine)
    eos = tok.eos_token_id
    try:
        ints = b.compile(("json", '{"type": "integer"}'), timeout=60)
        nums = b.compile(("json", '{"type": "number"}'), timeout=60)
        top = 2 ** 63 - 1 if engine == "xgrammar" else 9223372036854774784
        assert accepts_text(b.matcher(ints), tok, str(top), eos)
        assert accepts_text(b.matcher(ints), tok, str(-top), eos)
        assert not accepts_text(b.matcher(ints), tok, str(2 ** 63), eos)
        assert accepts_text(b.matcher(nums), tok, "1234567.891", eos)
        assert not accepts_text(b.matcher(nums), tok, "1.2345678901234567891234", eos)
        if engine == "xgrammar":
            assert accepts_text(b.matcher(nums), tok, "1.2345678901234567e-308", eos)
            assert not accepts_text(b.matcher(nums), tok, "123456789012345678", eos)
            assert not accepts_text(b.matcher(nums), tok, "1e309", eos)
    finally:
        b.shutdown()
