"""One request's grammar state: a thin wrapper over xgrammar.GrammarMatcher with a small verb set.

Reference semantics: the matcher has consumed exactly the request's output tokens so far.
`fill_bitmask` writes the tokens allowed next (bit set = allowed) into one row of an int32 bitmask
[B, ceil(V / 32)] (a step's rows all at once: mask_filler.py); `accept_token` advances (False, state
unchanged, when the token is not allowed); `rollback(n)` undoes the last n accepted tokens; `is_terminated` is true once a stop token was
accepted; `find_jump_forward_string` is the text every continuation must start with ("" when the
grammar has a rule that cannot finish: XGrammar's search would never return there).
"""


class Matcher:
    error = None       # why the engine stopped (llg.LlgMatcher); XGrammar's never does

    def __init__(self, matcher, vocab_size: int, jump_forward: bool = True, allowed=None, allowed_words=None):
        """allowed: int32 [ceil(V / 32)] bitmask ANDed into every filled row (GrammarBackend.json_tokens);
        allowed_words: the same as a list of ints, which accept_token reads (made here when not given)."""
        self._m = matcher
        self.vocab_size = vocab_size
        self.jump_forward = jump_forward
        self.allowed = allowed
        self._words = allowed_words if allowed_words is not None or allowed is None else allowed.tolist()
        self.accepted = 0                 # tokens accepted and not rolled back
        self._terminated = matcher.is_terminated()   # XGrammar's, read once per change (a native call each)

    def accept_token(self, token: int) -> bool:
        ok = 0 <= token < self.vocab_size and self._allowed(token) and self._m.accept_token(token)
        if ok:
            self.accepted += 1
            self._terminated = self._m.is_terminated()
        return bool(ok)

    def accept_tokens(self, tokens) -> bool:
        """All or nothing: on a refused token the ones accepted before it are rolled back."""
        for i, t in enumerate(tokens):
            if not self.accept_token(t):
                self.rollback(i)
                return False
        return True

    def _allowed(self, token: int) -> bool:
        return self._words is None or bool((self._words[token >> 5] >> (token & 31)) & 1)

    def rollback(self, n: int) -> None:
        if n > 0:
            self._m.rollback(n)
            self.accepted -= n
            self._terminated = self._m.is_terminated()

    def fill_bitmask(self, bitmask, row: int) -> None:
        """One row; mask_filler.MaskFiller fills a step's rows as the three stages here, batched."""
        self._fill_native(bitmask, row)
        if self.allowed is not None:
            bitmask[row] &= self.allowed
        self.finish_fill(bitmask, row)

    def _fill_native(self, bitmask, row: int) -> None:
        if self._terminated:     # allows nothing (XGrammar raises)
            bitmask[row].zero_()
        else:
            self._m.fill_next_token_bitmask(bitmask, row)

    def native_matcher(self) -> tuple:
        """(engine, the engine's matcher) for a batched fill; (None, None): fill_bitmask fills the row alone."""
        return (None, None) if self._terminated else ("xgrammar", self._m)

    def finish_fill(self, bitmask, row: int) -> None:
        """This matcher's edits of its row after the engine's mask and the `allowed` filter."""

    def is_terminated(self) -> bool:
        return self._terminated

    def find_jump_forward_string(self) -> str:
        return self._m.find_jump_forward_string() if self.jump_forward else ""
