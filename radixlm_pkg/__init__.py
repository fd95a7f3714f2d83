"""radixlm: a structured-generation LLM runtime with a radix-tree KV cache."""

__version__ = "0.1.0"


_FRONTEND = {"function", "gen", "select", "system", "user", "assistant", "RuntimeEndpoint", "EngineBackend",
             "set_default_backend", "get_default_backend", "ProgramState", "gen_int", "gen_string",
             "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized"}


def __getattr__(name):
    if name == "Engine":
        from radixlm.runtime.engine import Engine
        return Engine
    if name == "ServerArgs":
        from radixlm.runtime.server_args import ServerArgs
        return ServerArgs
    if name in _FRONTEND:
        import radixlm.frontend_lang as fl
        return getattr(fl, name)
    raise AttributeError(f"module 'radixlm' has no attribute {name!r}")
