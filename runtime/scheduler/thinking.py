"""Thinking: the state of a request whose output starts inside a thinking block (plain Python).

The request carries the ids that end the thinking (`think_end_ids`, e.g. Qwen3's `</think>`).  Until
they are generated the output is free text: the request's grammar is held here (`req.grammar` is None,
so no mask, no jump-forward, no draft is constrained), and it is installed as the request's matcher
the moment the ids end the output; the answer starts after them (`answer_start`, an output index).
With a budget (`max_thinking_tokens`) the ids are forced, as jump-forward forces text, once that many
output tokens were thinking.  A request holding a grammar or a budget needs each token on the host
before its next step is planned, so overlap scheduling waits for it while it thinks.  A request
holding a grammar must answer: a stop token sampled while it thinks is replaced by the end ids (its
grammar then applies), so a constrained answer always follows the thinking.
"""

from __future__ import annotations

from typing import Optional


class Thinking:
    def __init__(self, end_ids: list, budget: Optional[int] = None):
        self.end_ids = list(end_ids)
        self.budget = budget
        self.grammar = None                       # the matcher held until the thinking ends
        self.answer_start: Optional[int] = None   # output index after the end ids; None while thinking
        self.forced = 0                           # end ids appended by the budget (0: the model ended it)

    @property
    def done(self) -> bool:
        return self.answer_start is not None

    def needs_host(self) -> bool:
        """The next step cannot be planned before this request's newest token is known on the host."""
        return not self.done and (self.grammar is not None or self.budget is not None)

    def hold(self, req) -> None:
        """A grammar just compiled for a request that is still thinking: keep it off until the end ids."""
        if not self.done and req.grammar is not None:
            self.grammar, req.grammar = req.grammar, None

    def saw_end(self, req) -> bool:
        """After a token was appended: whether the end ids now end the output (the answer starts)."""
        out, end = req.output_ids, self.end_ids
        n = len(end)
        if self.done or len(out) < n or out[-1] != end[-1] or out[len(out) - n:] != end:
            return False
        self._end(req)
        return True

    def _end(self, req) -> None:
        self.answer_start = req.output_len
        req.grammar, self.grammar = self.grammar, None

    def over_budget(self, req) -> bool:
        return not self.done and self.budget is not None and req.output_len >= self.budget

    def force_ids(self, req) -> list:
        """The end ids still missing (the output may already end with a first part of them)."""
        out, end = req.output_ids, self.end_ids
        for k in range(min(len(end) - 1, len(out)), 0, -1):
            if out[len(out) - k:] == end[:k]:
                return end[k:]
        return list(end)

    def stops_early(self, reason: dict, token: int) -> bool:
        """The token just sampled is a stop token that would end a request before the answer its grammar needs."""
        return (not self.done and self.grammar is not None and reason["type"] == "stop"
                and reason.get("matched") == token)

    def replace_stop(self, req, room: int) -> int:
        """Swap the stop token that ends the output for the end ids (when they fit `room`, counted with it);
        how many were appended (0: the stop stays)."""
        stop = req.output_ids[-1]
        del req.output_ids[req.output_len - 1:]
        added = self.force_if_room(req, room + 1)
        if not added:
            req.output_ids.append(stop)
        return added

    def force_if_room(self, req, room: int) -> int:
        """Out of budget: append the missing end ids when they leave room for an answer token (`room`: the
        tokens the request may still add); how many were appended (0: none fit, the thinking goes on)."""
        return self.force_end(req) if len(self.force_ids(req)) < room else 0

    def force_end(self, req) -> int:
        """Append the missing end ids (the caller checked they fit); the answer starts after them."""
        ids = self.force_ids(req)
        req.output_ids.extend(ids)
        self.forced = len(ids)
        self._end(req)
        return len(ids)
