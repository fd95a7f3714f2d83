"""A random decoder over a grammar matcher: the tiny random model's sampling, without the model.

`walk(matcher, vocab, rng, max_steps, prefer)` fills the matcher's bitmask each step and picks an allowed
token: with probability `bias` one from `prefer(allowed)` (a test's adversary: digits to run a number on,
closing quotes to end a string), else any allowed token.  Returns (token ids, finished): finished means
the stop token was accepted (a `stop` finish), else the walk hit max_steps (a `length` finish)."""

import torch


def allowed_ids(bitmask, vocab: int) -> list:
    bits = (bitmask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1     # [W, 32]
    return bits.flatten()[:vocab].nonzero().flatten().tolist()


def walk(matcher, vocab: int, rng, max_steps: int, prefer=None, bias: float = 0.5):
    bitmask = torch.zeros(1, (vocab + 31) // 32, dtype=torch.int32)
    ids = []
    for _ in range(max_steps):
        if matcher.is_terminated():
            return ids, True
        bitmask.zero_()
        matcher.fill_bitmask(bitmask, 0)
        allowed = allowed_ids(bitmask, vocab)
        assert allowed, "a live grammar state allows at least one token"
        favoured = prefer(allowed) if prefer else []
        pick = rng.choice(favoured) if favoured and rng.random() < bias else rng.choice(allowed)
        assert matcher.accept_token(pick)
        ids.append(pick)
    return ids, matcher.is_terminated()


def accepts_text(matcher, tok, text: str, eos: int) -> bool:
    """Whether the matcher takes the text's tokens and then the stop token."""
    ids = tok.encode(text, add_special_tokens=False)
    return matcher.accept_tokens(ids) and matcher.accept_token(eos)


def check_compiled(backend, tok, schema: dict, accepted: list, refused: list, walks: int = 30,
                   min_finished: int = 10) -> None:
    """schema compiles on backend; the matcher takes each (jsonschema-valid) instance of `accepted` and none of
    `refused`; with walks, every finished random walk (closing tokens favoured) validates with jsonschema."""
    import json
    import random

    import jsonschema

    compiled = backend.compile(("json", json.dumps(schema)), timeout=60)
    validator = jsonschema.Draft202012Validator(schema)
    for instance in accepted:
        assert validator.is_valid(instance), instance
        assert accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id), instance
    for instance in refused:
        assert not accepts_text(backend.matcher(compiled), tok, json.dumps(instance), tok.eos_token_id), instance
    close = {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in '"}]')} | {tok.eos_token_id}
    rng, finished = random.Random(0), 0
    for _ in range(walks):
        ids, done = walk(backend.matcher(compiled), len(tok), rng, 60, prefer=lambda ok: [i for i in ok if i in close])
        if done:
            finished += 1
            value = json.loads(tok.decode(ids[:-1]))
            assert validator.is_valid(value), value
    assert finished >= (min_finished if walks else 0)
