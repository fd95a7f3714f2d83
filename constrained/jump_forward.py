"""Jump-forward: append the text a grammar forces, tokenized canonically in its left context.

`jump_forward(matcher, tokenizer, tail, budget)` asks the matcher for the forced continuation, then
retokenizes `tail` (the last output tokens that may still change: accepted by the matcher, not yet
sent, KV not computed) together with it.  Tokens of `tail` up to the first one whose boundary moves
are kept; the rest are rolled back in the matcher and replaced.  Reference semantics: afterwards
tail[:keep] + new == tokenizer.encode(decode(tail) + forced) and the matcher has accepted them.
"""

from __future__ import annotations

from typing import Optional

MAX_TAIL = 8          # at most this many trailing tokens are retokenized


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _encode(tokenizer, text: str) -> list:
    return tokenizer.encode(text, add_special_tokens=False)


def forced_text(matcher) -> str:
    """The text every continuation must start with ("" when none, or when it ends inside a character)."""
    try:
        return matcher.find_jump_forward_string()
    except UnicodeDecodeError:
        return ""


def jump_forward(matcher, tokenizer, tail: list, budget: int, forced: Optional[str] = None) -> Optional[tuple[int, list]]:
    """Returns (removed, added): drop the last `removed` tokens of the output, append `added`; the
    matcher already reflects the change.  None when nothing is forced, the canonical tokens would
    grow the output by more than `budget`, or the text does not survive a round trip.  forced: the
    matcher's forced_text, when the caller has asked for it already."""
    if forced is None:
        forced = forced_text(matcher)
    if not forced:
        return None
    tail = list(tail[-MAX_TAIL:]) if tail else []
    tail_text = _decode(tokenizer, tail) if tail else ""
    while tail and "\ufffd" in tail_text:   # a tail that starts or ends inside a character
        tail = tail[1:]
        tail_text = _decode(tokenizer, tail) if tail else ""
    text = tail_text + forced
    new = _encode(tokenizer, text)
    if _decode(tokenizer, new) != text:
        return None
    keep = 0
    while keep < len(tail) and keep < len(new) and tail[keep] == new[keep]:
        keep += 1
    removed, added = len(tail) - keep, new[keep:]
    if not added or len(added) - removed > budget:
        return None
    matcher.rollback(removed)
    if not matcher.accept_tokens(added):
        if not matcher.accept_tokens(tail[keep:]):
            raise RuntimeError("jump-forward could not restore the grammar state")
        return None
    return removed, added
