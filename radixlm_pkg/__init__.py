"""radixlm: a structured-generation LLM runtime with a radix-tree KV cache."""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "Engine":
        from radixlm.runtime.engine import Engine
        return Engine
    if name == "ServerArgs":
        from radixlm.runtime.server_args import ServerArgs
        return ServerArgs
    raise AttributeError(f"module 'radixlm' has no attribute {name!r}")
