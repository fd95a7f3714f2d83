"""LaraMini (HF LaraMiniForCausalLM; fields: linear_hybrid_config.py): Qwen3-Next's hybrid stack (qwen3_next.py) with
Qwen3.5's gated delta nets, plain Qwen3 attention (per-head q/k norms, no output gate) that rotates only in the
sliding-window layers (the full layers have no positional encoding), softmax-routed experts with an un-gated shared
expert on every layer, and norms that multiply by their weight in float32 (olmo2_rms_norm), not by 1 + weight.
The published checkpoints (and HF's saves) fuse each delta net's input projections into in_proj ([q k v | z | b | a])
and name its output norm out_norm: split and renamed at load into the names HF's model has.
Only the attention layers have KV in the pool, numbered among themselves; their windows are declared in that numbering.
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .llama import LlamaAttention
from .olmo2 import olmo2_rms_norm
from .qwen3_next import HybridLayer, Qwen3NextForCausalLM


class LaraMiniAttention(LlamaAttention):
    """Qwen3 attention whose q/k norms multiply by their weight in float32."""

    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        return olmo2_rms_norm(qk, self.qk_norm, self.eps)  # [T, Hq+Hkv, D]


class LaraMiniLayer(HybridLayer):
    norm = staticmethod(olmo2_rms_norm)


class LaraMiniForCausalLM(Qwen3NextForCausalLM):
    """Qwen3NextForCausalLM's contract with LaraMini's attention, windows and norms."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.declare_attention_windows()

    attention_class = LaraMiniAttention
    layer_class = LaraMiniLayer

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        layer = super().make_layer(layer_id, attn_backend, dtype, device)
        if isinstance(layer.mixer, LaraMiniAttention):
            layer.mixer.rope = layer_id not in self.config.nope_layers   # nope_layers in the model's numbering
        return layer

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return olmo2_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    @staticmethod
    def attention_targets(p: str, attn: LaraMiniAttention) -> dict:
        q, kv, w, heads = attn.q_size, attn.kv_size, attn.qkv_proj, attn.num_heads
        return {p + "q_proj.weight": (w[:q], False), p + "k_proj.weight": (w[q:q + kv], False),
                p + "v_proj.weight": (w[q + kv:], False), p + "o_proj.weight": (attn.o_proj, False),
                p + "q_norm.weight": (attn.qk_norm[:heads], True), p + "k_norm.weight": (attn.qk_norm[heads:], True)}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The published checkpoints' fused in_proj split into HF's in_proj_qkv/_z/_b/_a and out_norm named norm;
        the un-gated shared expert under the name SparseMoeBlock gives one (shared_experts)."""
        return super().checkpoint_tensors(_split_fused(named_tensors, self.config.linear_attention))


def _split_fused(named_tensors, la):
    rows = (la.conv_dim, la.value_dim, la.num_v_heads, la.num_v_heads)
    for name, tensor in named_tensors:
        name = name.replace(".mlp.shared_expert.", ".mlp.shared_experts.")
        if name.endswith("linear_attn.out_norm.weight"):
            yield name.replace("out_norm", "norm"), tensor
        elif name.endswith("linear_attn.in_proj.weight"):
            for part, rows_of_part in zip(("qkv", "z", "b", "a"), tensor.split(rows)):
                yield name.replace("in_proj", f"in_proj_{part}"), rows_of_part
        else:
            yield name, tensor
