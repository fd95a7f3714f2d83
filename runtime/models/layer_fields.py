"""Config fields several families read alike (no torch, no registrations, so any family's reader may import it):
each layer's sliding window, the gelu-tanh activation."""

GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh")


def layer_windows(hf_config, default_pattern) -> tuple:
    """Per layer: the sliding window (int) or None (full attention), from layer_types or the model's pattern."""
    window = getattr(hf_config, "sliding_window", None)
    n = int(hf_config.num_hidden_layers)
    types = list(getattr(hf_config, "layer_types", None) or [])
    if not types:
        types = ["sliding_attention" if default_pattern(i) else "full_attention" for i in range(n)]
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown or len(types) != n:
        raise ValueError(f"unsupported layer_types {types!r}")
    return tuple(int(window) if t == "sliding_attention" and window else None for t in types)


def _gelu_tanh(arch: str, hf_config) -> str:
    act = getattr(hf_config, "hidden_activation", None) or getattr(hf_config, "hidden_act", None)
    if act not in GELU_TANH:
        raise ValueError(f"{arch}: only the gelu-tanh activation is supported, got {act!r}")
    return "gelu_tanh"
