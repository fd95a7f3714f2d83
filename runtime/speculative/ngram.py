"""Prompt-lookup drafting: the longest recent n-gram that ends the token list, and what followed its
last earlier occurrence (plain Python, no torch).

An index per request maps each n-gram (n in [min_n, max_n]) to the position just after its most
recent occurrence; it is extended with the tokens appended since the last call, so one lookup costs
O(max_n) dictionary operations whatever the length of the request.
"""


class NgramIndex:
    def __init__(self, min_n: int = 2, max_n: int = 5, window: int = 8192):
        self.min_n, self.max_n = min_n, max_n
        self.window = window           # occurrences further back than this many tokens are ignored
        self._last: dict = {}          # (n-gram tuple) -> position of the token after its latest occurrence
        self._indexed = 0              # n-grams ending before this position are in _last

    def draft(self, tokens, k: int) -> list:
        """k tokens that followed the latest earlier occurrence of the longest n-gram ending `tokens`
        ([] when none recurs). `tokens` must only grow or be cut back between calls."""
        end = len(tokens)
        if end < self._indexed:
            self._last.clear()
            self._indexed = 0
        self._extend(tokens, end - 1)   # the n-grams ending at the last token are not indexed yet
        for n in range(min(self.max_n, end - 1), self.min_n - 1, -1):
            pos = self._last.get(tuple(tokens[end - n:end]))
            if pos is not None and end - pos <= self.window:
                out: list = []
                for i in range(k):   # past the end, the text repeats with the period end - pos
                    j = pos + i
                    out.append(tokens[j] if j < end else out[j - end])
                return out
        return []

    def _extend(self, tokens, upto: int) -> None:
        """Index every n-gram ending before position `upto` (exclusive)."""
        start = max(self._indexed, upto - self.window)
        if start >= upto:
            return
        base = max(0, start - self.max_n)
        seg = tokens[base:upto]
        last = self._last
        for end in range(start - base, upto - base):
            for n in range(self.min_n, self.max_n + 1):
                if end - n + 1 < 0:
                    break
                last[tuple(seg[end - n + 1:end + 1])] = base + end + 1
        self._indexed = upto
