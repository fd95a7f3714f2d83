"""HTTP plumbing shared by the native, SGLang and OpenAI routes: JSON/SSE responses, API errors and keys, client scopes, the generate request's input (no torch)."""
