"""One choice's output text split into reasoning and content, whole or as stream deltas.

Without a thinking block (the prompt closed it) or with separate_reasoning false, the text is all content.
With stream_reasoning false the reasoning is sent in one delta once it is complete (when the answer
starts, or at the end).  Harmony's tool calls come out as whole calls (`calls`).
"""

from __future__ import annotations

from radixlm.runtime.openai.reasoning.base import Parsed


class _Passthrough:
    def feed(self, delta: str) -> Parsed:
        return Parsed(content=delta)

    def finish(self) -> Parsed:
        return Parsed()


class ChoiceReasoning:
    def __init__(self, plan):
        parses = plan.separate and (plan.thinking or plan.fmt.keep_special_tokens)
        self.parser = plan.fmt.parser() if parses else _Passthrough()
        self.stream_reasoning = plan.stream
        self.reasoning = ""
        self._held = ""             # reasoning not yet sent (stream_reasoning false)
        self.finished = False

    def feed(self, delta: str) -> Parsed:
        return self._out(self.parser.feed(delta) if delta else Parsed(), final=False)

    def finish(self) -> Parsed:
        if self.finished:
            return Parsed()
        self.finished = True
        return self._out(self.parser.finish(), final=True)

    def _out(self, p: Parsed, final: bool) -> Parsed:
        self.reasoning += p.reasoning
        if self.stream_reasoning:
            return p
        self._held += p.reasoning
        p.reasoning = ""
        if self._held and (final or p.content or p.calls):
            p.reasoning, self._held = self._held, ""
        return p

    def whole(self, text: str) -> Parsed:
        out = self.feed(text)
        out += self.finish()
        return out
