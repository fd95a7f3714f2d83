"""A step's grammar masks filled at once: each engine fills all of its matchers' rows in one call, on its
own threads where the batch is large enough to pay for them (XGrammar's BatchGrammarMatcher, llguidance's
LLExecutor), then the token filter shared by the JSON matchers is ANDed into their rows in one tensor op,
and last each matcher's own edits run row by row (matcher.Matcher.finish_fill).

The rows hold exactly what each matcher's own fill_bitmask writes.
"""

from __future__ import annotations

import os

MIN_ROWS_PER_THREAD = 32      # a threaded fill starts its threads on every call (~0.05-0.15 ms)
MAX_THREADS = 8


def host_threads() -> int:
    """Threads one engine may fill masks on: half the cores this process may run on, at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores // 2))


class MaskFiller:
    def __init__(self, threads: int | None = None):
        self.threads = threads or host_threads()
        self._xgr = {}     # threads -> xgrammar.BatchGrammarMatcher
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
            from llguidance.torch import fill_next_token_bitmask_par

            if self._llg is None:
                import llguidance

                self._llg = llguidance.LLExecutor(self.threads)
            fill_next_token_bitmask_par(self._llg, llg, bitmask)
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
        threads = max(1, min(self.threads, len(matchers) // MIN_ROWS_PER_THREAD))
        if threads == 1 and len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(bitmask, rows[0])
            return
        batch = self._xgr.get(threads)
        if batch is None:
            import xgrammar

            batch = self._xgr[threads] = xgrammar.BatchGrammarMatcher(threads)
        batch.batch_fill_next_token_bitmask(matchers, bitmask, rows)
