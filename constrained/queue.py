"""Requests waiting for their grammar: compiled off the scheduler loop, with a wall-clock limit.

The scheduler adds a request with its grammar key and polls every loop iteration; `poll()` returns
the requests whose grammar is ready (req.grammar set to a fresh matcher) and those that failed,
each with a client-facing message.  A request fails when its compile runs past the future's
`deadline` (set by the pool when the compile starts), or has not even started within `max_wait_s`
(a long queue of slow grammars).  Under `--grammar-backend auto` a JSON schema whose XGrammar compile
runs past its deadline is handed to llguidance instead (one more deadline), rather than refused.  Plain Python: no torch.
"""

from __future__ import annotations

import time

from radixlm.constrained.backend import GrammarError
from radixlm.constrained.errors import GrammarTimeout


class GrammarQueue:
    def __init__(self, backend, timeout_s: float, max_wait_s: float | None = None):
        self.backend = backend
        self.timeout_s = timeout_s
        self.max_wait_s = max(60.0, 10 * timeout_s) if max_wait_s is None else max_wait_s
        self.items: list = []     # (req, future, deadline[, key: absent once the second engine took over])

    def __len__(self) -> int:
        return len(self.items)

    def add(self, req, key: tuple) -> None:
        self.items.append((req, self.backend.submit(key), time.monotonic() + self.max_wait_s, key))

    def remove(self, rid) -> list:
        gone = [req for req, _, _ in self.items if req.rid == rid]
        self.items = [it for it in self.items if it[0].rid != rid]
        return gone

    def poll(self, now: float | None = None) -> tuple[list, list]:
        """([ready reqs], [(failed req, message)]); both leave the queue."""
        now = time.monotonic() if now is None else now
        ready, failed, keep = [], [], []
        for item in self.items:
            req, fut, deadline = item[:3]
            if fut.done():
                try:
                    req.grammar = self.backend.matcher(fut.result())
                    ready.append(req)
                except GrammarTimeout as exc:       # the slow lane's worker was stopped at the timeout
                    if not self._second_engine(item, keep):
                        failed.append((req, str(exc)))
                except GrammarError as exc:
                    failed.append((req, str(exc)))
                except Exception as exc:  # a backend bug fails this request, never the loop
                    failed.append((req, f"grammar compilation failed: {exc}"))
            elif getattr(fut, "deadline", None) is not None and now >= fut.deadline:
                if not self._second_engine(item, keep):
                    failed.append((req, f"grammar compilation timed out after {self.timeout_s:g} s "
                                        f"(the server's --grammar-timeout); simplify the schema"))
            elif now >= deadline and getattr(fut, "deadline", None) is None:
                failed.append((req, f"grammar compilation did not start within {self.max_wait_s:g} s: "
                                    f"the server is busy compiling other grammars; retry later"))
            else:
                keep.append(item)
        self.items = keep
        return ready, failed

    def _second_engine(self, item, keep: list) -> bool:
        """A timed-out item handed to the backend's second engine (kept, waiting on its compile): whether it was."""
        second = self.backend.after_timeout(item[3]) if len(item) > 3 else None
        if second is not None:
            keep.append((item[0], second, item[2]))
        return second is not None
