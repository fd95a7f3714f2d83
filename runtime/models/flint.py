"""Flint (HF FlintForCausalLM): Qwen3-MoE's layers (per-head q/k norms, attention_bias on all four projections)
with gpt-oss's attention sinks (a learned logit per query head in each softmax's denominator: gpt_oss.py), rope on
the sliding-window layers only (the full ones are NoPE: config.nope_layers), and sigmoid-routed experts with an
un-gated shared MLP (moe_config.py) after the dense layers of mlp_only_layers.

transformers 5 names the released self_attn.softmax_offset sinks in its modules and saves them back; its shared MLP is
mlp.shared_expert.*; both are read.  No tensor parallelism (the sinks would need sharding with the heads), FP8
checkpoints or native one-call decode.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from .moe_model import MoEForCausalLM

# Flint's names -> transformers 5's module names and SparseMoeBlock's (an un-gated shared MLP: shared_experts)
_RENAMES = ((".self_attn.softmax_offset", ".self_attn.sinks"), (".mlp.shared_expert.", ".mlp.shared_experts."))


class FlintForCausalLM(MoEForCausalLM):
    """MoEForCausalLM's contract on one rank, with sinks in every layer."""

    loads_fp8_checkpoints = False

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        for layer in self.layers:   # float32 whatever the model dtype: the kernels add them to float32 sums
            layer.self_attn.sinks = nn.Parameter(torch.empty(config.num_heads, dtype=torch.float32, device=device),
                                                 requires_grad=False)   # [Hq]
        attn_backend.set_layer_variants(config.layer_windows or [None] * config.num_layers,
                                        sinks=[layer.self_attn.sinks for layer in self.layers])

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported (its sinks are not "
                         "sharded with the heads)")

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.sinks"] = (layer.self_attn.sinks, False)
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        for name, tensor in named_tensors:
            for old, new in _RENAMES:
                name = name.replace(old, new)
            yield name, tensor
