"""Strings with minLength/maxLength: XGrammar's own rule lets raw control characters through (not
JSON); schema_normalize gives the bounds as a JSON-string pattern instead.  Oracle: outputs sampled at
random from the compiled grammar's token masks (a random model that favours control-character tokens)
all parse with json.loads and validate against the original schema with jsonschema (no control
characters, and no overlong or surrogate UTF-8 that decodes to U+FFFD and breaks the length)."""

import json
import random

import jsonschema
import pytest
import torch
import xgrammar as xgr
from tiny_models import make_tiny_tokenizer
from xgrammar.testing import _is_grammar_accept_string as accepts

from radixlm.constrained.schema_normalize import MAX_PATTERN_LENGTH, normalize_schema_text

SCHEMAS = [
    {"type": "string", "maxLength": 6},
    {"type": "string", "minLength": 2, "maxLength": 4},
    {"type": "string", "minLength": 3},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                      "tags": {"type": "array", "items": {"type": "string", "minLength": 1,
                                                                          "maxLength": 3}, "maxItems": 2}},
     "required": ["name", "tags"], "additionalProperties": False},
]


@pytest.fixture(scope="module")
def compiler():
    tok = make_tiny_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    texts = [tok.decode([i]) for i in range(len(tok))]
    control = {i for i, t in enumerate(texts) if any(ord(c) < 0x20 for c in t)}  # a set: tested per allowed token
    assert control, "the tiny byte-level vocabulary has control-character tokens"
    return xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False), tok, control


def sample(compiled, tok, control, rng, max_steps=80):
    """A random walk over the grammar's masks; the decoded text, or None when it did not finish."""
    vocab = len(tok)
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    ids = []
    for _ in range(max_steps):
        if matcher.is_terminated():
            return tok.decode(ids)
        matcher.fill_next_token_bitmask(bitmask)
        allowed = allowed_ids(bitmask, vocab)
        if not allowed:
            return None
        risky = [i for i in allowed if i in control]
        pick = rng.choice(risky) if risky and rng.random() < 0.5 else rng.choice(allowed)
        assert matcher.accept_token(pick)
        ids.append(pick)
    return tok.decode(ids) if matcher.is_terminated() else None


def allowed_ids(bitmask, vocab: int) -> list:
    """The token ids a [1, ceil(V / 32)] int32 bitmask allows (bit i % 32 of word i // 32), ascending: what
    xgrammar.testing.bitmask_to_bool_mask gives, unpacked in one vectorized step instead of its slow loop."""
    bits = (bitmask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1     # [W, 32]
    return bits.flatten()[:vocab].nonzero().flatten().tolist()


def test_allowed_ids_equal_xgrammars_unpacking(compiler):
    comp, tok, _ = compiler
    matcher = xgr.GrammarMatcher(comp.compile_json_schema(json.dumps(SCHEMAS[3]), any_whitespace=False))
    bitmask = xgr.allocate_token_bitmask(1, len(tok))
    for text in ('', '{"name": "ab'):
        for t in tok.encode(text, add_special_tokens=False):
            matcher.accept_token(t)
        matcher.fill_next_token_bitmask(bitmask)
        want = xgr.testing.bitmask_to_bool_mask(bitmask, len(tok))[0].nonzero().flatten().tolist()
        assert allowed_ids(bitmask, len(tok)) == [i for i in want if i < len(tok)]


def test_the_raw_rule_lets_control_characters_through():
    """What the normalization is for (if a later XGrammar fixes it, the rewrite is still exact)."""
    raw = xgr.Grammar.from_json_schema(json.dumps({"type": "string", "maxLength": 5}))
    fixed = xgr.Grammar.from_json_schema(normalize_schema_text(json.dumps({"type": "string", "maxLength": 5})))
    assert accepts(fixed, '"abc"') and accepts(fixed, '"abcde"') and accepts(fixed, '""')
    assert not accepts(fixed, '"abcdef"') and not accepts(fixed, '"a\x01b"') and not accepts(fixed, '"a\tb"')
    assert not accepts(fixed, '"a"b"') and accepts(fixed, '"\u00e9\u4e2d\U0001F600"')
    if accepts(raw, '"a\x01b"'):
        assert not json_ok('"a\x01b"')


def json_ok(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:40])
def test_sampled_outputs_are_json_and_valid(compiler, schema):
    comp, tok, control = compiler
    compiled = comp.compile_json_schema(normalize_schema_text(json.dumps(schema)), any_whitespace=False)
    rng = random.Random(0)
    done = 0
    for _ in range(80):
        text = sample(compiled, tok, control, rng)
        if text is None:
            continue
        done += 1
        jsonschema.validate(json.loads(text), schema)
    assert done >= 25


def test_left_alone():
    for schema in ({"type": "string", "maxLength": 3, "pattern": "^a+b+$"}, {"type": "string", "format": "date"},
                   {"type": ["string", "null"], "maxLength": 3}, {"type": "string", "maxLength": 100000},
                   {"type": "string", "minLength": 2, "maxLength": MAX_PATTERN_LENGTH + 1},
                   {"type": "string", "enum": ["ab"], "maxLength": 3}):
        assert normalize_schema_text(json.dumps(schema)) == json.dumps(schema)
