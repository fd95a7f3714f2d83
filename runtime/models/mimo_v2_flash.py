"""MiMo-V2-Flash (HF MiMoV2FlashForCausalLM): pre-norm layers (laguna.py's PreNormLayer) of attention over sliding and
full layers, each type rotating the first dims of each head by its own rope (Laguna's), then the dense SwiGLU MLP or
DeepSeek-V3-routed experts without shared ones (moe_config.py) by mlp_layer_types.

Attention (mimo_v2_flash_config.py): layer l has kv_heads[l] K/V heads; queries and keys are head_dim (D) wide, values
v_head_dim (Dv) wide and times value_scale; the sliding layers add a learned sink logit per query head to each
softmax's denominator (gpt-oss's sinks, the attention backend's layer variants).  The pool holds the most KV heads at
width D: a layer with fewer stores each K/V head repeated (query head j still reads its own KV head), and values are
zero-padded to D, so the output's first Dv dims are the attention's.  Multi-token-prediction weights (model.mtp.*)
are skipped, as HF skips them.  One rank, no FP8, no native one-call decode.
Notation: T tokens, H hidden, Hq query heads, h this layer's KV heads, P the pool's.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .laguna import LagunaForCausalLM
from .layer_ops import Rotary
from .layers import param
from .multimodal_text import split_stacked_experts
from .packed_linear import linear


class NarrowValueAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        m = c.mimo
        self.layer_id, self.attn_backend = layer_id, attn_backend
        self.num_heads, self.kv_heads, self.pool_heads = c.num_heads, m.kv_heads[layer_id], c.num_kv_heads
        self.head_dim, self.v_head_dim, self.value_scale = c.head_dim, m.v_head_dim, m.value_scale
        self.sizes = (c.num_heads * c.head_dim, self.kv_heads * c.head_dim, self.kv_heads * m.v_head_dim)
        self.qkv_proj = param(sum(self.sizes), c.hidden_size, dtype=dtype, device=device)  # [Hq*D + h*D + h*Dv, H]
        self.qkv_bias = param(sum(self.sizes), dtype=dtype, device=device) if c.attention_bias else None
        self.o_proj = param(c.hidden_size, c.num_heads * m.v_head_dim, dtype=dtype, device=device)  # [H, Hq*Dv]
        sliding = bool(c.layer_windows and c.layer_windows[layer_id])
        # float32 whatever the model dtype: the kernels add them to float32 sums
        self.sinks = param(c.num_heads, dtype=torch.float32, device=device) if sliding else None  # [Hq]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, d = x.shape[0], self.num_heads, self.head_dim
        q, k, v = linear(x, self.qkv_proj, self.qkv_bias).split(self.sizes, dim=-1)
        qk = rotary.apply_(torch.cat((q.view(T, hq, d), k.view(T, self.kv_heads, d)), dim=1))  # [T, Hq+h, D]
        v = F.pad(v.view(T, self.kv_heads, self.v_head_dim) * self.value_scale, (0, d - self.v_head_dim))  # [T, h, D]
        o = self.attn_backend.forward(qk[:, :hq], self.to_pool(qk[:, hq:]), self.to_pool(v), self.layer_id, fb)
        return linear(o[..., :self.v_head_dim].reshape(T, -1), self.o_proj)  # [T, Hq*Dv] -> [T, H]

    def to_pool(self, x: torch.Tensor) -> torch.Tensor:
        """[T, h, D] -> [T, P, D]: each head repeated P / h times."""
        repeat = self.pool_heads // self.kv_heads
        return x if repeat == 1 else x.repeat_interleave(repeat, dim=1)

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this attention's weights under `prefix`."""
        t, start = {}, 0
        for name, size in zip(("q_proj", "k_proj", "v_proj"), self.sizes):
            t[f"{prefix}{name}.weight"] = (self.qkv_proj[start:start + size], False)
            if self.qkv_bias is not None:
                t[f"{prefix}{name}.bias"] = (self.qkv_bias[start:start + size], False)
            start += size
        t[prefix + "o_proj.weight"] = (self.o_proj, False)
        if self.sinks is not None:
            t[prefix + "sinks"] = (self.sinks, False)
        return t


class MiMoV2FlashForCausalLM(LagunaForCausalLM):
    """LagunaForCausalLM's contract with NarrowValueAttention; the sliding layers' sinks are attention variants."""

    LAYER_KIND = "narrow-value sliding/full"

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        attn_backend.set_layer_variants(config.layer_windows or [None] * config.num_layers,
                                        sinks=[layer.self_attn.sinks for layer in self.layers])

    def make_attention(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return NarrowValueAttention(self.config, layer_id, attn_backend, dtype, device)

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported (its KV heads differ "
                         "by layer and its sinks are not sharded with the heads)")

    def _weight_targets(self) -> dict:
        return self._own_attention_targets()

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream without multi-token-prediction weights, the released sinks (attention_sink_bias)
        under transformers' name, stacked experts split per expert."""
        for name, tensor in named_tensors:
            if not name.startswith(("model.mtp.", "mtp.")):
                name = name.replace(".self_attn.attention_sink_bias", ".self_attn.sinks")
                yield from split_stacked_experts(name, tensor, self.config)
