"""No repeated key in a JSON object (constrained/unique_keys.py), on the real SmolLM2 tokenizer.

Oracles: a brute-force pass over the whole vocabulary (a token is allowed iff the bare grammar allows it
and the text with it does not close a name the object already has, found by a regex over the flat
object's text), `json` with an object_pairs_hook that sees duplicates, and `jsonschema`.
"""

import json
import re

import jsonschema
import pytest
import torch

from radixlm.constrained.backend import GrammarBackend
from radixlm.constrained.unique_keys import KeyScanner, UniqueKeys

EOS = 2
V = 49152
WORDS = (V + 31) // 32
OPEN_INTS = {"type": "object", "additionalProperties": {"type": "integer"}}


@pytest.fixture(scope="module", params=["xgrammar", "llguidance"])
def backend(request, smol_tokenizer):
    b = GrammarBackend(smol_tokenizer, V, {EOS}, engine=request.param)
    yield b
    b.shutdown()


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def allowed(matcher) -> list:
    mask = torch.zeros(1, WORDS, dtype=torch.int32)        # [1, W]
    matcher.fill_bitmask(mask, 0)
    bits = mask[0].numpy().view("uint32")
    return [t for t in range(V) if (int(bits[t >> 5]) >> (t & 31)) & 1]


def flat_keys(text: str) -> list:
    """The names of a flat object's text (a string right after `{` or `,`, closed)."""
    return re.findall(r'[{,]\s*"((?:[^"\\]|\\.)*)"', text)


@pytest.mark.parametrize("prefix", ['{"type": 1, "ty', '{"type": 1, "type', '{"type": 1, "', '{"type": 1',
                                    '{"a": 1, "type": 2, "t', '{"a": 1, "type": 2, "a'])
def test_mask_is_grammar_minus_repeated_names(backend, smol_tokenizer, prefix):
    compiled = backend.compile(("json", json.dumps(OPEN_INTS)), timeout=60)
    wrapped, bare = backend.matcher(compiled), backend.matcher(compiled)._inner
    assert isinstance(wrapped, UniqueKeys)
    ids = enc(smol_tokenizer, prefix)
    assert wrapped.accept_tokens(ids) and bare.accept_tokens(ids)
    pieces = backend.key_vocab().pieces
    expect = []
    for t in allowed(bare):
        keys = flat_keys((prefix.encode() + pieces[t]).decode("utf-8", "replace"))
        if len(keys) == len(set(keys)):
            expect.append(t)
    got = allowed(wrapped)
    assert got == expect
    if prefix.endswith(('"type', '"a')):
        assert len(got) < len(allowed(bare))       # the repeated name was there to be cleared


def has_duplicate(text: str) -> bool:
    seen = []

    def hook(pairs):
        names = [k for k, _ in pairs]
        seen.append(len(names) != len(set(names)))
        return dict(pairs)
    json.loads(text, object_pairs_hook=hook)
    return any(seen)


def loop_decoder(matcher, pieces: list, head: str, loop: str, limit: int = 80) -> tuple:
    """A decoder that wants `head` then `loop` over and over: each step the allowed token that extends the text along
    the repeated script furthest; off the script, a token starting with a quote, then a closing brace,
    then the lowest id.  Returns (text, terminated)."""
    text = b""
    target = head.encode() + loop.encode() * limit
    for _ in range(limit):
        ok = allowed(matcher)
        on = [t for t in ok if t != EOS and pieces[t] and target.startswith(text + pieces[t])]
        if on:
            t = max(on, key=lambda t: len(pieces[t]))
        else:
            t = next((t for t in ok if pieces[t].startswith(b'"')), None) or \
                next((t for t in ok if pieces[t].startswith(b"}")), None) or (EOS if EOS in ok else ok[0])
        assert matcher.accept_token(t)
        if matcher.is_terminated():
            return text.decode(), True
        text += pieces[t]
    return text.decode(), False


@pytest.mark.parametrize("schema,script", [
    (OPEN_INTS, ("{", '"a": 1, ')),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
     ('{"a": 1, ', '"b": 1, ')),                 # XGrammar keeps named keys out of the extra ones, not extras twice
    ({"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}}, ("{", '"a": 1, ')),
])
def test_a_looping_decoder_ends_without_repeats(backend, schema, script):
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    pieces = backend.key_vocab().pieces
    text, done = loop_decoder(backend.matcher(compiled), pieces, *script)
    assert done and not has_duplicate(text), text
    jsonschema.validate(json.loads(text), schema)
    text, done = loop_decoder(backend.matcher(compiled)._inner, pieces, *script)   # the old behaviour: to the limit
    keys = flat_keys(text)
    assert not done and len(keys) > len(set(keys)) + 3, text


def test_rollback_restores_the_names(backend, smol_tokenizer):
    compiled = backend.compile(("json", json.dumps(OPEN_INTS)), timeout=60)
    m = backend.matcher(compiled)
    first = enc(smol_tokenizer, '{"type": 1, "size": 2')
    assert m.accept_tokens(first)
    before = allowed(m)
    more = enc(smol_tokenizer, ', "width": 3, "wid')
    assert m.accept_tokens(more)
    m.rollback(len(more))
    assert allowed(m) == before
    assert m.accept_tokens(enc(smol_tokenizer, ', "si'))
    assert not any(backend.key_vocab().pieces[t].startswith(b'ze"') for t in allowed(m))


def test_no_name_left_keeps_the_grammar_mask(backend, smol_tokenizer):
    """Every name the grammar allows is used: the grammar's mask stands (a repeat, not a dead end)."""
    schema = {"type": "object", "patternProperties": {"^x$": {"type": "integer"}}, "additionalProperties": False}
    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    m = backend.matcher(compiled)
    assert m.accept_tokens(enc(smol_tokenizer, '{"x": 1, "x'))
    assert allowed(m) == allowed(_replayed(backend, compiled, smol_tokenizer, '{"x": 1, "x'))


def _replayed(backend, compiled, tok, text):
    bare = backend.matcher(compiled)._inner
    assert bare.accept_tokens(enc(tok, text))
    return bare


@pytest.mark.parametrize("text,want", [
    ('{"a": 1, "b', []),                                        # inside a new name: nothing to clear
    ('{"a": 1, "', [b'a"']),
    ('{"a": 1', [b',"a"', b', "a"']),
    ('{"a": 1, ', [b'"a"', b' "a"']),
    ('{"a": "x, \\"a\\": ', []),                                # inside a value string
    ('{"a": {"b": 1, "', [b'b"']),                               # the inner object's names only
    ('{"a": {"b": 1}, "', [b'a"']),
    ('{"a": [1, 2', []),
    ('{"a": true', [b',"a"', b', "a"']),
])
def test_scanner_completions(text, want):
    s = KeyScanner()
    s.feed(text.encode())
    assert sorted(s.completions()) == sorted(want)


def _state(s: KeyScanner) -> tuple:
    objects = [(sorted(o.keys), o.expect) if not isinstance(o, str) else o for o in s.stack]
    return objects, s.in_string, s.escaped, s.in_key, bytes(s.buf), s.scalar, sorted(s.completions())


@pytest.mark.parametrize("text", ['{"a": "x, \\"a\\": 1", "bcd": {"e\\\\": [1, "f"], "g": "long value text"}, "b',
                                  '{"name": "Ann", "tags": ["x", "y"], "name2": "a\\u0041b", "n": -1.5e3, "na',
                                  '[{"k": "v"}, {"k": "w", "kk": "\\""}, {"k'])
def test_scanner_reads_pieces_as_bytes(text):
    """Fed in pieces of any split (as tokens arrive), the scanner ends where a byte-at-a-time read ends."""
    import random

    data = text.encode()
    whole = KeyScanner()
    for b in data:
        whole.feed(bytes([b]))
    rng = random.Random(len(text))
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
        pieces = KeyScanner()
        for lo, hi in zip([0] + cuts, cuts + [len(data)]):
            pieces.feed(data[lo:hi])
            probe = KeyScanner()
            probe.feed(data[:hi])
            assert _state(pieces) == _state(probe)
        assert _state(pieces) == _state(whole)
