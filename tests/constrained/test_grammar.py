"""Grammar backend, matcher verbs and jump-forward retokenization on the real SmolLM2 tokenizer.

Oracles: xgrammar's own acceptance (bitmask bits == accept_token), the tokenizer's encoding of the
forced text in its left context, and jsonschema validation of the text a simulated decoder writes.
"""

import json

import jsonschema
import pytest

from radixlm.constrained.backend import BUILTIN_JSON, GrammarBackend, GrammarError, grammar_key
from radixlm.constrained.jump_forward import jump_forward
from radixlm.runtime.sampling_params import SamplingParams

EOS = 2
V = 49152


@pytest.fixture(scope="module")
def backend(smol_tokenizer):
    b = GrammarBackend(smol_tokenizer, V, {EOS})
    yield b
    b.shutdown()


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def dec(tok, ids):
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_grammar_key_kinds():
    assert grammar_key(SamplingParams()) is None
    assert grammar_key(SamplingParams(json_schema='{"type": "object"}')) == ("json", '{"type": "object"}')
    assert grammar_key(SamplingParams(json_schema=BUILTIN_JSON)) == ("json_builtin", "")
    assert grammar_key(SamplingParams(regex="a+")) == ("regex", "a+")
    assert grammar_key(SamplingParams(ebnf='root ::= "a"')) == ("ebnf", 'root ::= "a"')


def test_compile_cache_keyed_by_kind_and_text(backend):
    schema = json.dumps({"type": "object", "properties": {"cache_probe": {"type": "integer"}}})
    f1, f2 = backend.submit(("json", schema)), backend.submit(("json", schema))
    assert f1 is f2 and f1.result(30) is f2.result(30)
    assert backend.submit(("regex", schema)) is not f1          # same text, other kind
    assert backend.submit(("json", schema + " ")) is not f1     # other text


@pytest.mark.parametrize("key,quoted", [
    (("json", '{"type": "foo"}'), 'Unsupported type "foo"'),
    (("regex", "(abc"), "parenthesis is not closed"),
    (("ebnf", "root ::= undefined_rule"), 'Rule "undefined_rule" is not defined'),
])
def test_invalid_grammars_quote_the_backend(backend, key, quoted):
    with pytest.raises(GrammarError) as info:
        backend.compile(key, timeout=30)
    msg = str(info.value)
    assert quoted in msg and msg.startswith("invalid ")
    assert ".cc:" not in msg                                    # no C++ file/line prefix
    with pytest.raises(GrammarError):                           # cached failure, same answer
        backend.compile(key, timeout=30)


def _allowed(bitmask, row, token):
    return bool((int(bitmask[row, token // 32]) >> (token % 32)) & 1)


def test_matcher_verbs(backend, smol_tokenizer):
    import xgrammar as xgr
    tok = smol_tokenizer
    m = backend.matcher(backend.compile(("regex", r"(yes|no)!"), timeout=30))
    bm = xgr.allocate_token_bitmask(2, V)
    m.fill_bitmask(bm, 1)
    yes, no_, bang, = enc(tok, "yes"), enc(tok, "no"), enc(tok, "!")
    assert len(yes) == 1 and len(no_) == 1 and len(bang) == 1
    assert _allowed(bm, 1, yes[0]) and _allowed(bm, 1, no_[0])
    assert not _allowed(bm, 1, bang[0]) and not _allowed(bm, 1, EOS)
    assert not m.accept_token(bang[0]) and m.accepted == 0       # refused: state unchanged
    assert m.accept_token(yes[0]) and m.find_jump_forward_string() == "!"
    m.rollback(1)                                                 # back to the start
    assert m.accepted == 0 and m.accept_token(no_[0])
    assert m.accept_token(bang[0]) and not m.is_terminated()
    m.fill_bitmask(bm, 0)
    assert _allowed(bm, 0, EOS) and not _allowed(bm, 0, yes[0])
    assert m.accept_token(EOS) and m.is_terminated()


def test_terminated_state_follows_the_engine(backend, smol_tokenizer):
    """Matcher keeps XGrammar's is_terminated (a native call) cached; oracle: the engine's own answer after
    every accept, refusal and rollback, on a JSON schema wrapped in UniqueKeys and on a regex."""
    import random

    tok, rng = smol_tokenizer, random.Random(5)
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    for key, text in [(("json", schema), '{"a": 12}'), (("regex", r"(yes|no)!"), "yes!")]:
        m = backend.matcher(backend.compile(key, timeout=30))
        inner = getattr(m, "_inner", m)
        ids = enc(tok, text) + [EOS]
        for _ in range(40):
            if m.accepted < len(ids) and rng.random() < 0.7:
                assert m.accept_token(ids[m.accepted])
            elif m.accepted and rng.random() < 0.8:
                m.rollback(rng.randint(1, m.accepted))
            else:                                   # a token the grammar refuses here: nothing changes
                assert not m.accept_token(EOS if m.accepted < len(ids) - 1 else ids[0])
            assert m.is_terminated() == inner._m.is_terminated() == (m.accepted == len(ids))
            assert (m.native_matcher()[0] is None) == m.is_terminated() and m.error is None


def _simulate(backend, tok, key, target: str, use_jump_forward=True, by_char=False):
    """Decode `target` with the grammar: each step 'samples' the canonical next token of the remaining
    target text (by_char: the token of its next character alone, so boundaries move), then
    jump-forward appends forced text.  Returns (ids, jump-forward events)."""
    m = backend.matcher(backend.compile(key, timeout=60))
    ids, events = [], []
    for _ in range(400):
        text = dec(tok, ids)
        assert target.startswith(text), (text, target)
        if text == target:
            assert m.accept_token(EOS) and m.is_terminated()
            return ids, events
        nxt = enc(tok, target[len(text):len(text) + 1] if by_char else target[len(text):])[0]
        assert m.accept_token(nxt), (text, dec(tok, [nxt]))
        ids.append(nxt)
        if not use_jump_forward:
            continue
        tail = ids[-1:]                       # the scheduler's window: the token just sampled
        forced = m.find_jump_forward_string()
        done = jump_forward(m, tok, tail, budget=10_000)
        if done is None:
            continue
        removed, added = done
        # the oracle: the tokenizer's own encoding of the forced text in its left context
        assert tail[:len(tail) - removed] + added == enc(tok, dec(tok, tail) + forced)
        ids[len(ids) - removed:] = added
        assert m.accepted == len(ids)
        events.append((forced, removed, len(added)))
    raise AssertionError("did not finish")


LONG_KEYS = {
    "type": "object",
    "properties": {
        "customer_identification_number": {"type": "integer"},
        "preferred_contact_method_description": {"type": "string"},
        "subscription_status": {"enum": ["active_subscription", "cancelled_by_customer", "pending"]},
        "is_verified": {"type": "boolean"},
    },
    "required": ["customer_identification_number", "preferred_contact_method_description",
                 "subscription_status", "is_verified"],
}
INSTANCE = {"customer_identification_number": 42, "preferred_contact_method_description": "email me",
            "subscription_status": "cancelled_by_customer", "is_verified": True}


def test_jump_forward_long_keys_and_enums(backend, smol_tokenizer):
    target = json.dumps(INSTANCE)          # the compact form: ", " and ": " separators
    key = ("json", json.dumps(LONG_KEYS))
    ids, events = _simulate(backend, smol_tokenizer, key, target)
    jsonschema.validate(json.loads(dec(smol_tokenizer, ids)), LONG_KEYS)
    forced = "".join(f for f, _, _ in events)
    for k in LONG_KEYS["required"]:
        assert k in forced                 # every fixed key came from jump-forward
    assert "elled_by_customer" in forced    # the enum is forced once its first tokens decide it
    plain, _ = _simulate(backend, smol_tokenizer, key, target, use_jump_forward=False)
    assert dec(smol_tokenizer, plain) == target
    moved, events = _simulate(backend, smol_tokenizer, key, target, by_char=True)
    assert dec(smol_tokenizer, moved) == target
    assert any(r > 0 for _, r, _ in events)  # the sampled token was replaced: its boundary moved


@pytest.mark.parametrize("key,target", [
    (("json", json.dumps({"enum": ["kubernetes-deployment", "docker-compose-file"]})), '"kubernetes-deployment"'),
    (("regex", r"(Monday|Tuesday|Wednesday), 20[0-9]{2}-(0[1-9]|1[0-2])"), "Wednesday, 2024-07"),
    (("ebnf", 'root ::= "BEGIN transaction " [a-z]+ " END transaction"'), "BEGIN transaction abc END transaction"),
])
def test_jump_forward_enums_and_fixed_text(backend, smol_tokenizer, key, target):
    for by_char in (False, True):
        ids, events = _simulate(backend, smol_tokenizer, key, target, by_char=by_char)
        assert dec(smol_tokenizer, ids) == target and events


def test_jump_forward_respects_budget(backend, smol_tokenizer):
    m = backend.matcher(backend.compile(("regex", "a, this text is all forced"), timeout=30))
    first = enc(smol_tokenizer, "a")
    assert m.accept_token(first[0])
    assert jump_forward(m, smol_tokenizer, first, budget=1) is None and m.accepted == 1
    removed, added = jump_forward(m, smol_tokenizer, first, budget=100)
    assert first[:1 - removed] + added == enc(smol_tokenizer, "a, this text is all forced")


def test_required_names_missing_from_properties_are_declared():
    from radixlm.constrained.schema_normalize import declare_required_properties

    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "w"],
              "additionalProperties": {"type": "integer"},
              "items": [{"type": "object", "required": ["x"]}],
              "definitions": {"closed": {"type": "object", "required": ["z"], "additionalProperties": False},
                              "pattern": {"required": ["p"], "patternProperties": {"^p": {"type": "string"}}}}}
    fixed = declare_required_properties(schema)
    assert fixed["properties"] == {"a": {"type": "string"}, "w": {"type": "integer"}}
    assert fixed["items"][0]["properties"] == {"x": {}}
    assert "properties" not in fixed["definitions"]["closed"]
    assert fixed["definitions"]["pattern"]["properties"] == {"p": {"type": "string"}}   # the pattern's schema governs it
    assert "w" not in schema["properties"]  # the input is not modified


def test_declared_properties_are_not_opened_to_any_value():
    from radixlm.constrained.schema_normalize import normalize_schema_text

    schema = {"type": "object", "properties": {"a": {"type": "object"}}, "minProperties": 2}
    assert json.loads(normalize_schema_text(json.dumps(schema))) == schema   # {"a": 2} would pass XGrammar
