"""A step's masks filled at once (constrained/mask_filler.py) equal each matcher's own fill_bitmask, row for
row: XGrammar and llguidance matchers, JSON ones (the `allowed` filter, unique keys) and others, finished
ones, a grammar with fill_bitmask only, rows in any order."""

import json
import random

import pytest
import torch

from radixlm.constrained.backend import GrammarBackend
from radixlm.constrained.mask_filler import LLG_MIN_BATCH, MaskFiller

EOS = 2
V = 49152
WORDS = (V + 31) // 32
OPEN = {"type": "object", "additionalProperties": {"type": "integer"}}
LONG_TEXT = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 40}}, "required": ["note"]}
# (grammar key, text the matcher has accepted; "<eos>" ends it)
STATES = [
    (("json", json.dumps(OPEN)), '{"type": 1, "type'),      # a repeated name to ban
    (("json", json.dumps(OPEN)), '{"a": 1, "b'),
    (("json", json.dumps(LONG_TEXT)), '{"note": "ab'),        # XGrammar's bounded string lets control bytes in
    (("json", json.dumps(LONG_TEXT)), ''),
    (("json", json.dumps(LONG_TEXT)), '{"note": "x"}'),       # may end: the stop token
    (("json", json.dumps(LONG_TEXT)), '{"note": "x"}<eos>'),  # finished
    (("regex", r"[a-c]+x"), 'ab'),
]


class OwnFill:
    """A grammar with fill_bitmask only (no engine to batch with)."""

    def fill_bitmask(self, bitmask, row):
        bitmask[row] = 0
        bitmask[row, 1] = 0b1011


@pytest.fixture(scope="module", params=["xgrammar", "llguidance"])
def backend(request, smol_tokenizer):
    b = GrammarBackend(smol_tokenizer, V, {EOS}, engine=request.param)
    yield b
    b.shutdown()


def matchers(backend, tokenizer, copies: int) -> list:
    out = []
    for key, text in STATES * copies:
        m = backend.matcher(backend.compile(key, timeout=60))
        ids = tokenizer.encode(text.replace("<eos>", ""), add_special_tokens=False)
        assert m.accept_tokens(ids + ([EOS] if text.endswith("<eos>") else [])), text
        out.append(m)
    return out


@pytest.mark.parametrize("copies", [1, LLG_MIN_BATCH // (len(STATES) - 1) + 1])   # one state is finished
def test_batched_fill_equals_each_matchers_own(backend, smol_tokenizer, copies):
    grammars = matchers(backend, smol_tokenizer, copies) + [OwnFill()]
    expect = torch.zeros(len(grammars), WORDS, dtype=torch.int32)      # [G, W]
    for i, g in enumerate(grammars):
        g.fill_bitmask(expect, i)
    rows = list(range(len(grammars) + 3))
    random.Random(copies).shuffle(rows)
    rows = rows[:len(grammars)]
    got = torch.full((len(grammars) + 3, WORDS), -1, dtype=torch.int32)  # [S, W], rows left over stay -1
    MaskFiller().fill(grammars, got, rows)
    for i, row in enumerate(rows):
        assert got[row].equal(expect[i]), (i, STATES[i % len(STATES)] if i < len(grammars) - 1 else "own fill")
    assert all(bool((got[r] == -1).all()) for r in set(range(got.shape[0])) - set(rows))


def test_the_states_exercise_every_stage(backend, smol_tokenizer):
    """The filter, the bans and the finished rows each change some row (so the equality above checks them)."""
    grammars = matchers(backend, smol_tokenizer, 1)
    native = torch.zeros(len(grammars), WORDS, dtype=torch.int32)
    full = torch.zeros(len(grammars), WORDS, dtype=torch.int32)
    for i, g in enumerate(grammars):
        inner = getattr(g, "_inner", g)
        inner._fill_native(native, i)
        g.fill_bitmask(full, i)
    assert not native[0].equal(full[0])          # a repeated name banned
    assert not bool(full[5].any())               # finished: nothing allowed
    if backend.options.engine == "xgrammar":
        assert not native[2].equal(full[2])      # the control-character filter
