"""GraniteSWA and GraniteMoeSWA (HF GraniteSWAForCausalLM, GraniteMoeSWAForCausalLM: Granite "swash"): Granite's
Llama layer, and GraniteMoeShared's experts (granite_moe.py), with three differences (granite_swa_config.py):

- sliding-window layers (config.layer_windows), enforced by the attention kernels;
- a learned sink logit per query head: HF scales each head's output by sigmoid(logsumexp(scores) - sink), which is
  softmax with exp(sink) added to its denominator, the attention sink gpt-oss has (gpt_oss.py); declared with the
  windows to the attention backend;
- a rope base per layer (config.layer_rope_thetas; 0: no rotary embedding, config.nope_layers), one cos/sin cache
  per distinct base.

No tensor parallelism, native one-call decode, GGUF or FP8 weights.  Notation as in llama.py: Hq query heads.
"""

import dataclasses
from typing import Optional

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_moe import GraniteMoeForCausalLM
from .layer_ops import Rotary, add_rms_norm
from .layers import param
from .llama import LlamaForCausalLM
from .quant_linear import embed
from .rope import rope_cos_sin_cache


class SinkWindowLayers:
    """What GraniteSWA adds to its base class (listed after this one): sinks, windows, a rope base per layer."""

    loads_fp8_checkpoints = False
    loads_gguf_weights = False
    quantizes_to_fp8 = False

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        c = config
        for layer in self.layers:   # float32 whatever the model dtype: the kernels add them to float32 sums
            layer.self_attn.sinks = param(c.num_heads, dtype=torch.float32, device=device)   # [Hq]
        attn_backend.set_layer_variants(c.layer_windows or [None] * c.num_layers,
                                        sinks=[layer.self_attn.sinks for layer in self.layers])
        self.layer_bases = c.layer_rope_thetas or (c.rope_theta,) * c.num_layers
        self.bases = sorted({b for b in self.layer_bases if b})   # buffer cos_sin_{k} holds base k's cache
        for k, base in enumerate(self.bases):
            cache = rope_cos_sin_cache(dataclasses.replace(c, rope_theta=base), max_context or c.context_length)
            self.register_buffer(f"cos_sin_{k}", cache.to(device=device, dtype=dtype), persistent=False)  # [C, D]

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """LlamaForCausalLM.forward (op by op) with each layer's own rope base."""
        self.attn_backend.init_forward_metadata(fb)
        x = embed(fb.input_ids, self.embed_tokens, self.dtype)  # [T, H]
        if self.config.embedding_multiplier != 1.0:
            x = x * self.config.embedding_multiplier  # [T, H]
        rotaries = {base: Rotary(fb.positions, getattr(self, f"cos_sin_{k}")) for k, base in enumerate(self.bases)}
        unrotated = Rotary(fb.positions, self.cos_sin)   # read by no layer without rope but for its query_scale None
        residual = None
        for layer, base in zip(self.layers, self.layer_bases):
            x, residual = layer(x, residual, rotaries.get(base, unrotated), fb)  # [T, H] each
        return add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)  # [T, H]

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s attention sinks are not in the native one-call decode"

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.sinks"] = (layer.self_attn.sinks, False)
        return t


class GraniteSWAForCausalLM(SinkWindowLayers, LlamaForCausalLM):
    """LlamaForCausalLM's contract (on one rank)."""


class GraniteMoeSWAForCausalLM(SinkWindowLayers, GraniteMoeForCausalLM):
    """GraniteMoeForCausalLM's contract (on one rank)."""
