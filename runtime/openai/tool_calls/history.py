"""GeneratedCalls: the token ids of recent assistant turns that made tool calls, keyed by call id,
so a later request that sends the turn back can reuse them verbatim (see prompt.py).  Bounded:
the oldest turns are forgotten first; a forgotten turn is rendered by the chat template.  Each turn
belongs to the API key that generated it (client_scope.Caller.key): `scoped(key)` is the view one
caller saves to and looks up in, so no key reuses another key's tokens."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Optional


class GeneratedCalls:
    def __init__(self, max_turns: int = 4096):
        self.max_turns = max_turns
        self._turns: OrderedDict = OrderedDict()   # first call id -> (call ids, calls, content, ids)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._turns)

    def scoped(self, owner: Optional[int]) -> "OwnedCalls":
        return OwnedCalls(self, owner)

    def save(self, calls: list, content: Optional[str], output_ids: list, owner: Optional[int] = None,
             reasoning: str = "") -> None:
        """calls: [(id, name, arguments text)] of one generated turn, in order; reasoning: its thinking as
        returned (reasoning_content), which a message sent back must carry to match."""
        if not calls or not output_ids:
            return
        key = (tuple(c[0] for c in calls), tuple((c[1], c[2]) for c in calls), (content or "", reasoning or ""))
        with self._lock:
            self._turns[(owner, calls[0][0])] = (key, list(output_ids))
            self._turns.move_to_end((owner, calls[0][0]))
            while len(self._turns) > self.max_turns:
                self._turns.popitem(last=False)

    def lookup(self, calls: list, content: str, owner: Optional[int] = None, reasoning: str = "") -> Optional[list]:
        """The generated ids of this assistant message, or None unless it is exactly a turn `owner` saved
        (same call ids, names, arguments as JSON values, content and reasoning)."""
        if not calls or calls[0][0] is None:
            return None
        with self._lock:
            found = self._turns.get((owner, calls[0][0]))
        if found is None:
            return None
        (ids, named_args, saved_content), output_ids = found
        if ids != tuple(c[0] for c in calls) or saved_content != (content, reasoning or ""):
            return None
        try:
            same = all(n == c[1] and json.loads(a) == c[2] for (n, a), c in zip(named_args, calls))
        except ValueError:
            return None
        return output_ids if same else None


class OwnedCalls:
    """One API key's view of a GeneratedCalls store."""

    def __init__(self, store: GeneratedCalls, owner: Optional[int]):
        self.store, self.owner = store, owner

    def save(self, calls: list, content: Optional[str], output_ids: list, reasoning: str = "") -> None:
        self.store.save(calls, content, output_ids, self.owner, reasoning)

    def lookup(self, calls: list, content: str, reasoning: str = "") -> Optional[list]:
        return self.store.lookup(calls, content, self.owner, reasoning)
