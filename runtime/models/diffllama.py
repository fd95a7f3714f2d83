"""DiffLlama (HF DiffLlamaForCausalLM): Llama's model whose attention is differential.  Per layer, with A_i the softmax
map of query head i over its group's keys, v_lo / v_hi the first / last Hkv/2 value heads (kv head j reading head
j mod Hkv/2 of each), and o_i = [A_i v_lo, A_i v_hi] (2D wide):
    out_p = (1 - lambda_init) * rms_norm(o_p - lambda * o_(p + Hq/2)),  p < Hq/2, over 2D without weight,
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init,
    lambda_init = 0.8 - 0.6 exp(-0.3 layer_id),
then o_proj over the Hq/2 pairs [T, Hq*D].

Both maps run in one call of the paged attention backend over twice the heads: queries [q, q] (2Hq), keys [k, k] and
values [v_lo, v_hi] (2Hkv), so query head i reads its group's keys with v_lo and head Hq + i the same keys with v_hi:
exactly HF's two calls.  The ModelConfig the runner sizes the KV pool and kernels by has those doubled heads
(more_dense_config.with_differential_attention): the pool holds each key twice, twice HF's KV bytes.  The model keeps
the checkpoint's heads (checkpoint_heads) for its weights.  No tensor parallelism, GGUF weights kept quantized, FP8
checkpoints or --quantization fp8, no native one-call decode.
Notation as in llama.py: T tokens, H hidden, Hq/Hkv the checkpoint's heads, D head_dim.
"""

import dataclasses
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaDecoderLayer
from .llama_like import OneRankLlama
from .packed_linear import linear

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def group_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's groupnorm: an RMSNorm without weight over each head pair's 2D dims, in float32.  x: [T, Hq/2, 2D]."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)  # [T, Hq/2, 2D]


def checkpoint_heads(config: ModelConfig) -> ModelConfig:
    """The kernels' ModelConfig (twice the heads) with the checkpoint's heads."""
    return dataclasses.replace(config, num_heads=config.num_heads // 2, num_kv_heads=config.num_kv_heads // 2)


class DiffLlamaAttention(LlamaAttention):
    """Llama's projections and rope (c: the checkpoint's heads) with the differential combination."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        for name in LAMBDAS:
            setattr(self, name, param(c.head_dim, dtype=dtype, device=device))  # [D]
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * layer_id)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's doubled K/V into the pool."""
        T, hq, hkv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(T, hq + 2 * hkv, D)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(qkv[:, :hq + hkv])  # [T, Hq+Hkv, D]
        q, k, v = qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:]
        v_lo, v_hi = v[:, :hkv // 2].repeat(1, 2, 1), v[:, hkv // 2:].repeat(1, 2, 1)  # [T, Hkv, D] each
        o = self.attn_backend.forward(torch.cat([q, q], 1), torch.cat([k, k], 1), torch.cat([v_lo, v_hi], 1),
                                      self.layer_id, fb)  # [T, 2Hq, D]
        o = torch.cat([o[:, :hq], o[:, hq:]], dim=-1)  # [T, Hq, 2D]: each head's two outputs
        diff = o[:, :hq // 2] - self.lambda_full(o.dtype) * o[:, hq // 2:]  # [T, Hq/2, 2D]
        out = (1 - self.lambda_init) * group_norm(diff, self.eps)  # [T, Hq/2, 2D]
        return linear(out.reshape(T, hq * D), self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]

    def lambda_full(self, dtype) -> torch.Tensor:
        """HF's lambda: each product summed in float32, its exp cast to the model dtype.  -> [] scalar."""
        lam1 = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dim=-1, dtype=torch.float32)).to(dtype)
        lam2 = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dim=-1, dtype=torch.float32)).to(dtype)
        return lam1 - lam2 + self.lambda_init


class DiffLlamaDecoderLayer(LlamaDecoderLayer):
    attention_class = DiffLlamaAttention


class DiffLlamaForCausalLM(OneRankLlama):
    """OneRankLlama over the checkpoint's heads with DiffLlamaDecoderLayer; config: the kernels' (doubled heads)."""

    quantizes_to_fp8 = False

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(checkpoint_heads(config), attn_backend, dtype=dtype, device=device, max_context=max_context)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return DiffLlamaDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s differential attention is not in the native one-call decode"

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t.update({f"model.layers.{i}.self_attn.{name}": (getattr(layer.self_attn, name), False)
                      for name in LAMBDAS})
        return t
