"""radixlm: structured-generation LLM runtime."""
