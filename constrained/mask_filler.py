"""A step's grammar masks filled at once: each engine fills all of its matchers' rows in one call
(XGrammar's BatchGrammarMatcher, llguidance's LLExecutor), then the token filter shared by the JSON matchers
is ANDed into their rows in one tensor op, and last each matcher's own edits run row by row
(matcher.Matcher.finish_fill).  The rows hold exactly what each matcher's own fill_bitmask writes.

One thread: XGrammar's threaded fill was slower than its single-threaded one here (512 JSON rows of the
49,152-token vocabulary on 2 cores: 1.8 ms on 2 threads, 1.2 ms on 1, 1.7 ms for the per-row calls).
"""

LLG_MIN_BATCH = 32


class MaskFiller:
    def __init__(self):
        self._xgr = None   # xgrammar.BatchGrammarMatcher
        self._llg = None   # llguidance.LLExecutor

    def fill(self, grammars: list, bitmask, rows: list) -> None:
        """Fill row rows[i] of the int32 bitmask [S, ceil(V / 32)] (host, contiguous) for grammars[i]."""
        import torch

        xgr, xgr_rows, llg, batched = [], [], [], []
        for grammar, row in zip(grammars, rows):
            native_matcher = getattr(grammar, "native_matcher", None)
            engine, native = native_matcher() if native_matcher is not None else (None, None)
            if engine == "xgrammar":
                xgr.append(native)
                xgr_rows.append(row)
            elif engine == "llguidance":
                llg.append((native, row))
            else:                  # no engine to batch with (a finished llguidance matcher): its own fill
                grammar.fill_bitmask(bitmask, row)
                continue
            batched.append((grammar, row))
        if xgr:
            self._fill_xgrammar(xgr, bitmask, xgr_rows)
        if llg:
            self._fill_llguidance(llg, bitmask)
        filters = {}
        for grammar, row in batched:
            allowed = grammar.allowed
            if allowed is not None:
                filters.setdefault(id(allowed), (allowed, []))[1].append(row)
        for allowed, at in filters.values():
            if len(at) == 1:
                bitmask[at[0]] &= allowed
            else:
                index = torch.tensor(at)
                bitmask[index] = bitmask[index] & allowed
        for grammar, row in batched:
            grammar.finish_fill(bitmask, row)

    def _fill_xgrammar(self, matchers: list, bitmask, rows: list) -> None:
        if len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, rows[0])
            return
        if self._xgr is None:
            import xgrammar

            self._xgr = xgrammar.BatchGrammarMatcher(1)
        self._xgr.batch_fill_next_token_bitmask(matchers, bitmask, rows)

    def _fill_llguidance(self, matchers: list, bitmask) -> None:
        """matchers: (llguidance matcher, row) pairs; its executor hands work to a thread (0.7 ms for 8 rows, where
        the per-row calls took 0.2 ms), so it is used from LLG_MIN_BATCH rows on."""
        from llguidance.torch import fill_next_token_bitmask, fill_next_token_bitmask_par

        if len(matchers) < LLG_MIN_BATCH:
            for m, row in matchers:
                fill_next_token_bitmask(m, bitmask, row)
            return
        if self._llg is None:
            import llguidance

            self._llg = llguidance.LLExecutor(1)
        fill_next_token_bitmask_par(self._llg, matchers, bitmask)
