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
