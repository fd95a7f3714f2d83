"""The reasoning formats by name, chosen from the chat template or --reasoning-parser.

A format knows its parser, the text that ends the thinking (`answer_marker`: the scheduler gets its
token ids, so a grammar starts after it and a thinking budget forces it) and whether a rendered prompt
leaves the output inside a thinking block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from radixlm.runtime.openai.reasoning import harmony, think_tags


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    answer_marker: str          # generated when the thinking ends
    closed_prompt: tuple        # a prompt ending (after whitespace) in one of these does not think
    make_parser: Callable
    parse_whole: Callable
    keep_special_tokens: bool   # its markers are special tokens, which the decoded text must keep
    detect: Callable[[str], bool]

    def parser(self):
        return self.make_parser()


_THINK = dict(answer_marker=think_tags.END, closed_prompt=(think_tags.END,), make_parser=think_tags.ThinkParser,
              parse_whole=think_tags.parse_whole, keep_special_tokens=False)
QWEN3 = ReasoningFormat("qwen3", detect=lambda t: think_tags.START in t, **_THINK)
DEEPSEEK_R1 = ReasoningFormat("deepseek-r1", detect=lambda t: think_tags.START in t and "<｜Assistant｜>" in t,
                              **_THINK)
GPT_OSS = ReasoningFormat("gpt-oss", answer_marker="<|channel|>final<|message|>",
                          closed_prompt=("<|channel|>final<|message|>",), make_parser=harmony.HarmonyParser,
                          parse_whole=harmony.parse_whole, keep_special_tokens=True,
                          detect=lambda t: "<|channel|>" in t and "analysis" in t)
FORMATS = {f.name: f for f in (QWEN3, DEEPSEEK_R1, GPT_OSS)}


def choose_reasoning(chat_template, override: Optional[str] = None) -> Optional[ReasoningFormat]:
    """The format named by the override (ValueError for an unknown name), else the one the template's
    markers identify (most specific first), else None: the output is all content."""
    if override:
        if override not in FORMATS:
            raise ValueError(f"unknown reasoning parser {override!r}; choose from {', '.join(FORMATS)}")
        return FORMATS[override]
    template = chat_template if isinstance(chat_template, str) else str(chat_template or "")
    for fmt in (GPT_OSS, DEEPSEEK_R1, QWEN3):
        if fmt.detect(template):
            return fmt
    return None


def thinking(fmt: Optional[ReasoningFormat], prompt_text: str) -> bool:
    """Whether the output of this rendered prompt starts inside a thinking block: yes with a format,
    unless the prompt already closed one (Qwen3 with enable_thinking false ends it with an empty block)."""
    return fmt is not None and not prompt_text.rstrip().endswith(fmt.closed_prompt)
