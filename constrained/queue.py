"""Requests waiting for their grammar: compiled off the scheduler loop, with a wall-clock limit.

The scheduler adds a request with its grammar key and polls every loop iteration; `poll()` returns
the requests whose grammar is ready (req.grammar set to a fresh matcher) and those that failed,
each with a client-facing message.  Plain Python: no torch.
"""

from __future__ import annotations

import time

from radixlm.constrained.backend import GrammarError


class GrammarQueue:
    def __init__(self, backend, timeout_s: float):
        self.backend = backend
        self.timeout_s = timeout_s
        self.items: list = []     # (req, future, deadline)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, req, key: tuple) -> None:
        self.items.append((req, self.backend.submit(key), time.monotonic() + self.timeout_s))

    def remove(self, rid) -> list:
        gone = [req for req, _, _ in self.items if req.rid == rid]
        self.items = [it for it in self.items if it[0].rid != rid]
        return gone

    def poll(self, now: float | None = None) -> tuple[list, list]:
        """([ready reqs], [(failed req, message)]); both leave the queue."""
        now = time.monotonic() if now is None else now
        ready, failed, keep = [], [], []
        for req, fut, deadline in self.items:
            if fut.done():
                try:
                    req.grammar = self.backend.matcher(fut.result())
                    ready.append(req)
                except GrammarError as exc:
                    failed.append((req, str(exc)))
                except Exception as exc:  # a backend bug fails this request, never the loop
                    failed.append((req, f"grammar compilation failed: {exc}"))
            elif now >= deadline:
                failed.append((req, f"grammar compilation timed out after {self.timeout_s:g} s "
                                    f"(the server's --grammar-timeout); simplify the schema"))
            else:
                keep.append((req, fut, deadline))
        self.items = keep
        return ready, failed
