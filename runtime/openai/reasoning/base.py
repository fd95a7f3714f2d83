"""What every reasoning parser returns, and the marker hold-back they share."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Parsed:
    """One piece of output split by channel: thinking text, answer text, and finished tool calls
    [(name, arguments text)] (only formats whose tool calls are channels, as harmony's, fill them)."""

    reasoning: str = ""
    content: str = ""
    calls: list = field(default_factory=list)

    def __iadd__(self, other: "Parsed") -> "Parsed":
        self.reasoning += other.reasoning
        self.content += other.content
        self.calls += other.calls
        return self

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.calls)


def partial_marker(text: str, markers) -> int:
    """The start of the longest suffix of text that is a proper prefix of one of markers (len(text)
    when none): text from there may still become a marker, so a stream holds it back."""
    best = len(text)
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), 0, -1):
            if text.endswith(m[:k]):
                best = min(best, len(text) - k)
                break
    return best


def trailing_space(text: str, end: int) -> int:
    """The start of the whitespace run that ends at text[end]."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end
