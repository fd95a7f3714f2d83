"""The OpenAI-compatible API: protocol, chat and completions handlers, the Responses API, prompts, and tool calls (no torch)."""
