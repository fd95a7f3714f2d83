"""Reasoning parsers for /v1/chat/completions and /v1/responses: one module per output format
(`think_tags` for Qwen3 and DeepSeek-R1's `<think>...</think>`, `harmony` for gpt-oss's analysis /
final channels), each an incremental parser whose streamed pieces join to the whole-text parse;
`choose_reasoning` picks one from the chat template or the --reasoning-parser option, and
`thinking` says where a request's output starts (inside its thinking block or not)."""

from radixlm.runtime.openai.reasoning.formats import FORMATS, ReasoningFormat, choose_reasoning, thinking

__all__ = ["FORMATS", "ReasoningFormat", "choose_reasoning", "thinking"]
