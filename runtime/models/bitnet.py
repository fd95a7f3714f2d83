"""BitNet b1.58 (HF BitNetForCausalLM) with float weights: Llama's layer with an RMSNorm (attn_sub_norm, over the
Hq*D attention output) between attention and o_proj, and a gated MLP of relu(gate)^2 * up with an RMSNorm
(ffn_sub_norm, over I) before down_proj.  Packed ternary checkpoints are refused (newtext_config.py).
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim, I intermediate.
"""

from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP
from .llama_like import OneRankLlama
from .packed_linear import linear


class BitNetAttention(LlamaAttention):
    """Llama's attention (no q/k norms) with its output RMSNormed before o_proj."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.attn_sub_norm = param(self.q_size, dtype=dtype, device=device)  # [Hq*D]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(qkv[:, :hq + hkv])  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        return linear(rms_norm(o.reshape(T, self.q_size), self.attn_sub_norm, self.eps), self.o_proj, self.o_bias)


class BitNetMLP(LlamaMLP):
    """down(ffn_sub_norm(relu(gate)^2 * up))."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__(c, dtype, device)
        self.eps = c.rms_norm_eps
        self.ffn_sub_norm = param(c.intermediate_size, dtype=dtype, device=device)  # [I]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate, up = linear(x, self.gate_up_proj).chunk(2, dim=-1)  # [T, I] each
        return linear(rms_norm(torch.relu(gate).square() * up, self.ffn_sub_norm, self.eps), self.down_proj)


class BitNetLayer(LlamaDecoderLayer):
    attention_class = BitNetAttention


class BitNetForCausalLM(OneRankLlama):
    """OneRankLlama's contract with BitNet's layers (op by op)."""

    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return BitNetLayer(self.config, layer_id, attn_backend, dtype, device, mlp=BitNetMLP(self.config, dtype, device))

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s sub-norms are not in the native one-call decode"

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t[p + "self_attn.attn_sub_norm.weight"] = (layer.self_attn.attn_sub_norm, False)
            t[p + "mlp.ffn_sub_norm.weight"] = (layer.mlp.ffn_sub_norm, False)
        return t
