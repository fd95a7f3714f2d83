"""Decode steps of a model whose weights stay in GGUF blocks (--quantization gguf): every decoder layer in one
native call, as native_decode.py runs dense weights.

The call is the same (radixlm_kernels/csrc/cpu_decode_layers.c: rms norm, rope, KV store, decode attention, SwiGLU);
its linear layers are the quantized library's layer linear (csrc/cpu_quant_layer.c) of the ISA the weights were
loaded for: it quantizes a layer input once for q/k/v and once for gate/up and computes what QuantWeight.linear (the
op-by-op path) computes.  The embedding and the lm head stay op by op (one product each).  A model with a weight the
call does not take (a format dequantized at load) or without a native library (ISA "torch") decodes op by op;
llama.enable_native_decode chooses at load.
"""

import ctypes
from typing import Optional

from radixlm.kernels import cpu_quant
from radixlm.runtime.models.native_decode import NativeDecode, layers_unsupported_reason

# Steps of more rows run op by op: the same products (the kernels group rows by 4), plus torch's glue between them,
# which a step of many rows amortizes
MAX_ROWS_QUANT = 64
_LINEARS = (("qkv_q", "self_attn", "qkv_proj"), ("o_q", "self_attn", "o_proj"), ("gate_up_q", "mlp", "gate_up_proj"),
            ("down_q", "mlp", "down_proj"))


def quant_unsupported_reason(model) -> Optional[str]:
    """Why this GGUF-quantized model cannot decode in the native call (None when it can)."""
    reason = layers_unsupported_reason(model)
    if reason is not None:
        return reason
    isa = model.quantization["isa"]
    if isa not in cpu_quant.NATIVE_ISAS:
        return f"quantized kernels by {isa}"
    for layer in model.layers:
        for _, part, name in _LINEARS:
            weight = getattr(getattr(layer, part), name)
            if len(weight.parts) > cpu_quant.MAX_LAYER_PARTS or any(p.fmt == "dense" for p in weight.parts):
                return f"a {name} weight in a format without a kernel"
    return None


class QuantNativeDecode(NativeDecode):
    """NativeDecode whose pointer table holds GGUF block weights (cpu_quant.LayerLinear descriptors)."""

    def __init__(self, model):
        self._descs = []  # the descriptors the pointer table points at
        self._fn = cpu_quant.layer_linear_fn(model.quantization["isa"])
        super().__init__(model)
        self.max_rows = MAX_ROWS_QUANT

    def _bind_linears(self, entry, layer) -> None:
        for field, part, name in _LINEARS:
            weight = getattr(getattr(layer, part), name)
            desc = cpu_quant.layer_linear_weights([(p.fmt, p.data) for p in weight.parts])
            self._descs.append(desc)
            setattr(entry, field, ctypes.addressof(desc))
        entry.quant_linear = self._fn

    def _lm_head(self):
        return None   # compute_logits: QuantWeight.linear, one product
