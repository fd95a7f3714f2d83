"""The main process: the HTTP app and its guards, health, native and SGLang routes, tokenizer manager, detokenizer, and launch of the child processes (no torch)."""
