"""Dory's fields (HF DoryForCausalLM, a looped normalized transformer: nGPT), as ModelConfig fields (family_config.py's
contract).  No torch here.

n_input_layers run once, then the n_recurrent_layers after them n_recurrent_loops times, then n_output_layers once.
recurrent_kv_cache_mode "per_loop": loop 0 keeps its KV in the recurrent layers' own KV layers, loop k > 0 in extra
ones after the last layer (num_hidden_layers + (k - 1) * n_recurrent_layers + j); "last_loop" (earlier loops read the
last loop's keys without writing theirs) is refused.  Sliding and full layers (layer_types), each kind with its own
default rope base (rope_parameters per layer type).  Released configs list each layer as an attention block and an
mlp block; transformers' config class halves them, as read here.
"""

from dataclasses import dataclass
from typing import Any, Dict

_KINDS = ("sliding_attention", "full_attention")


@dataclass(frozen=True)
class DoryLoops:
    """The sections, the loops, each layer's rope base and nGPT's scale constants (initializer_range, ngpt_alpha_init)."""

    input_layers: int
    recurrent_layers: int
    output_layers: int
    loops: int
    layer_thetas: tuple
    initializer_range: float
    alpha_init: float

    def slot(self, layer: int, loop: int) -> int:
        """The KV layer of `layer` in loop `loop` (0 outside the recurrent section)."""
        if loop == 0:
            return layer
        n = self.input_layers + self.recurrent_layers + self.output_layers
        return n + (loop - 1) * self.recurrent_layers + layer - self.input_layers


def _dory(arch: str, hf_config) -> Dict[str, Any]:
    n = int(hf_config.num_hidden_layers)
    mode = getattr(hf_config, "recurrent_kv_cache_mode", "per_loop")
    if mode != "per_loop":
        raise ValueError(f"{arch}: recurrent_kv_cache_mode {mode!r} is not supported; only 'per_loop'")
    for field in ("attention_bias", "mlp_bias"):
        if getattr(hf_config, field, False):
            raise ValueError(f"{arch}: {field}=True is not supported")
    types = list(hf_config.layer_types)
    if len(types) != n or set(types) - set(_KINDS):
        raise ValueError(f"{arch}: unsupported layer_types {types!r}; one of {_KINDS} per layer")
    thetas = {kind: _theta(arch, hf_config, kind) for kind in set(types)}
    loops = DoryLoops(int(hf_config.n_input_layers), int(hf_config.n_recurrent_layers), int(hf_config.n_output_layers),
                      int(hf_config.n_recurrent_loops), tuple(thetas[t] for t in types),
                      float(hf_config.initializer_range), float(hf_config.ngpt_alpha_init))
    if loops.input_layers + loops.recurrent_layers + loops.output_layers != n or loops.loops < 1:
        raise ValueError(f"{arch}: the sections must add up to num_hidden_layers ({n}) with at least one loop")
    window = int(hf_config.sliding_window)
    windows = [window if t == "sliding_attention" else None for t in types]
    recurrent = windows[loops.input_layers:loops.input_layers + loops.recurrent_layers]
    return dict(dory=loops, rms_norm_eps=1e-6, num_layers=n + (loops.loops - 1) * loops.recurrent_layers,
                layer_windows=tuple(windows + recurrent * (loops.loops - 1)),
                rope_params={"rope_type": "default", "rope_theta": 10000.0})   # unread: layer_thetas


def _theta(arch: str, hf_config, kind: str) -> float:
    params = dict((getattr(hf_config, "rope_parameters", None) or {}).get(kind) or {})
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"{arch}: rope_parameters[{kind!r}] rope_type {params['rope_type']!r} is not supported; "
                         "only 'default'")
    return float(params.get("rope_theta", 10000.0))


DORY_FIELDS = {"DoryForCausalLM": _dory}
DORY_MODEL_TYPES = {"dory": "DoryForCausalLM"}
