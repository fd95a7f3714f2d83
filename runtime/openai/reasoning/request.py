"""A chat or Responses request's reasoning settings -> the native request's sampling params.

`plan(tokenizer, fmt, prompt_ids, ...)` decides whether the output starts inside a thinking block (from
the rendered prompt's tail: Qwen3 with enable_thinking false, or any template that closed the block, does
not think), and then sends the end-of-thinking ids (`think_end_ids`: the scheduler starts a grammar after
them) and the budget (`max_thinking_tokens`, given or from a reasoning effort).

Effort -> budget (the Responses API's `reasoning.effort`, chat's `reasoning_effort`): minimal 256,
low 1024, medium 4096, high 16384 thinking tokens; an explicit max_thinking_tokens wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from radixlm.runtime.api.http import APIError
from radixlm.runtime.openai.reasoning.formats import ReasoningFormat, thinking

EFFORT_BUDGET = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
_RESERVED_KWARGS = {"messages", "tools", "add_generation_prompt", "tokenize", "documents", "continue_final_message",
                    "return_dict", "chat_template"}
_TAIL_TOKENS = 16       # the prompt's last tokens, decoded, show whether it opened or closed the block


@dataclass
class ReasoningPlan:
    fmt: ReasoningFormat
    thinking: bool              # the output starts inside a thinking block
    separate: bool = True       # reasoning_content apart from content (SGLang's separate_reasoning)
    stream: bool = True         # reasoning streamed as it comes (SGLang's stream_reasoning), else in one piece


def template_kwargs(kwargs: Optional[dict], effort: Optional[str] = None, param: str = "chat_template_kwargs") -> dict:
    """The client's chat_template_kwargs, checked: an object whose keys do not replace the template's own
    arguments; a reasoning effort also reaches the template as `reasoning_effort` (gpt-oss's reads it)."""
    clash = sorted(set(kwargs or {}) & _RESERVED_KWARGS)
    if clash:
        raise APIError(400, f"{param} may not set {', '.join(clash)} (the server sets it)", param=param)
    out = dict(kwargs or {})
    if effort is not None:
        out.setdefault("reasoning_effort", effort)
    return out


def budget(max_thinking_tokens: Optional[int], effort: Optional[str], param: str = "reasoning_effort"):
    if max_thinking_tokens is not None:
        return max_thinking_tokens
    if effort is None:
        return None
    if effort not in EFFORT_BUDGET:
        raise APIError(400, f"unknown reasoning effort {effort!r}; choose from {', '.join(EFFORT_BUDGET)}",
                       param=param)
    return EFFORT_BUDGET[effort]


def thinking_tokens(output_ids: list, end_ids) -> int:
    """Output tokens up to and including the first end-of-thinking ids (all of them when the output ended
    while thinking): the scheduler's own rule for where the answer starts."""
    if not end_ids:
        return 0
    n = len(end_ids)
    for i in range(len(output_ids) - n + 1):
        if output_ids[i:i + n] == end_ids:
            return i + n
    return len(output_ids)


def plan(tokenizer, fmt: Optional[ReasoningFormat], prompt_ids: list, sp: dict, thinking_budget: Optional[int],
         separate: Optional[bool] = None, stream: Optional[bool] = None, asked: bool = True) -> Optional[ReasoningPlan]:
    """The request's reasoning (None without a format); fills sp's thinking fields.  asked: the budget is the
    client's max_thinking_tokens, not one from a reasoning effort (which a model without reasoning ignores, as
    SGLang and vLLM do: clients send it to every model)."""
    if fmt is None:
        if thinking_budget is not None and asked:
            raise APIError(400, "a thinking budget needs a reasoning model: this server has no reasoning parser "
                                "(start it with --reasoning-parser)", param="max_thinking_tokens")
        return None
    tail = tokenizer.decode(prompt_ids[-_TAIL_TOKENS:], skip_special_tokens=False)
    out = ReasoningPlan(fmt, thinking(fmt, tail), separate is not False, stream is not False)
    if fmt.keep_special_tokens and sp.get("skip_special_tokens") is None:
        sp["skip_special_tokens"] = False      # harmony's channels are special tokens
    if out.thinking:
        sp["think_end_ids"] = tokenizer.encode(fmt.answer_marker, add_special_tokens=False)
        if thinking_budget is not None and asked:
            sp["max_thinking_tokens"] = thinking_budget
    return out
