"""The layout of JSON-schema answers: one value per line, indented (`--json-indent 2`, the server's default),
or compact on one line (`--json-indent 0`).  Either way every finished output validates, whitespace is
never open-ended (no run of spaces or newlines a model could loop on), and no raw control character other
than the layout's newlines gets into the text."""

import json
import random

import jsonschema
import pytest
import torch
from grammar_walk import accepts_text, allowed_ids, walk
from tiny_models import make_tiny_tokenizer

from radixlm.constrained.backend import GrammarBackend

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 100},
                                           "tags": {"type": "array", "items": {"type": "integer"}},
                                           "owner": {"type": "object", "properties": {"id": {"type": "integer"}},
                                                     "required": ["id"]}},
          "required": ["name", "tags", "owner"]}
VALUE = {"name": "ab", "tags": [1, 2], "owner": {"id": 3}}


@pytest.fixture(scope="module")
def layouts():
    tok = make_tiny_tokenizer()
    made = {indent: GrammarBackend(tok, len(tok), {tok.eos_token_id}, json_indent=indent) for indent in (0, 2)}
    yield tok, made
    for b in made.values():
        b.shutdown()


@pytest.mark.parametrize("indent", [0, 2])
def test_the_answer_is_laid_out_as_configured(layouts, indent):
    tok, made = layouts
    backend = made[indent]
    compiled = backend.compile(("json", json.dumps(SCHEMA)), timeout=60)
    pretty, compact = json.dumps(VALUE, indent=2), json.dumps(VALUE)
    assert accepts_text(backend.matcher(compiled), tok, pretty if indent else compact, tok.eos_token_id)
    assert not accepts_text(backend.matcher(compiled), tok, compact if indent else pretty, tok.eos_token_id)
    assert not accepts_text(backend.matcher(compiled), tok, pretty.replace("\n  ", "\n   ", 1), tok.eos_token_id)


@pytest.mark.parametrize("indent", [0, 2])
def test_random_walks_validate_and_hold_no_other_control_character(layouts, indent):
    tok, made = layouts
    backend = made[indent]
    compiled = backend.compile(("json", json.dumps(SCHEMA)), timeout=60)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    close = {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in '"}]')} | {tok.eos_token_id}
    rng, finished = random.Random(0), 0
    for _ in range(30):
        ids, done = walk(backend.matcher(compiled), len(tok), rng, 120, prefer=lambda ok: [i for i in ok if i in close])
        text = tok.decode(ids[:-1] if done else ids)
        assert not any(ord(c) < 0x20 and c != "\n" for c in text), repr(text)
        assert "\n" not in text or indent
        if done:
            finished += 1
            assert validator.is_valid(json.loads(text)), text
    assert finished >= 10


def test_a_newline_token_never_enters_a_string(layouts):
    """The indented layout needs newline tokens, so the control-character filter lets them through; XGrammar's
    string rules keep them out of strings (its length-bounded rule too), and tabs stay filtered."""
    tok, made = layouts
    backend = made[2]
    compiled = backend.compile(("json", json.dumps(SCHEMA)), timeout=60)
    matcher = backend.matcher(compiled)
    assert matcher.accept_tokens(tok.encode('{\n  "name": "a', add_special_tokens=False))
    bitmask = torch.zeros(1, (len(tok) + 31) // 32, dtype=torch.int32)
    matcher.fill_bitmask(bitmask, 0)
    allowed = {tok.decode([i]) for i in allowed_ids(bitmask, len(tok))}
    assert "b" in allowed and not any("\n" in t or "\t" in t for t in allowed)


def test_the_server_option_is_bounded():
    from radixlm.runtime.server_args import ServerArgs

    assert ServerArgs().json_indent == 2
    with pytest.raises(ValueError, match="json_indent"):
        ServerArgs(json_indent=-1)
