"""Multi-head latent attention (HF DeepseekV3Attention; DeepSeek-V2's and GLM-4.7-Flash's are the same) in the
absorbed form SGLang runs: the KV pool holds one "kv head" per token, [k_pe | c] of width R + C (its rotated rope key
and its normed latent), and every query head attends to it with a query of the same width.

HF per head h: q_h = [q_nope_h | q_pe_h], k_h = [W_UK_h c | k_pe], v_h = W_UV_h c, out_h = softmax(q_h . k_h * s) v_h.
Here q_nope_h . (W_UK_h c) = (W_UK_h^T q_nope_h) . c, so the query is [rope(q_pe_h) | W_UK_h^T q_nope_h] and the
value read back is the latent itself, projected by W_UV_h after the attention: the cache keeps R + C numbers per
token and layer, not heads * (qk_head_dim + v_head_dim).  The pool's V buffer is its K buffer (KVPool v_is_k); the
output's first R dims, read from k_pe, are dropped.  The scale s is set explicitly (mla_config.py).

Weights: qkv_a_proj fuses [q_a_proj; kv_a_proj_with_mqa] (or [q_proj; kv_a_proj_with_mqa] without q_lora_rank) in
one GEMM; kv_b_proj is kept per head as [Hq, N + Vd, C] (W_UK_h rows, then W_UV_h rows).  Interleaved-rope
checkpoints are reordered at load (deepseek.py), so the rope part rotates as rotate-half (layer_ops.Rotary).
Notation: T tokens, H hidden, Hq heads, N qk_nope_head_dim, R qk_rope_head_dim, C kv_lora_rank, Vd v_head_dim.
"""

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary, rms_norm
from .layers import param
from .packed_linear import linear

LATENT_NORM_EPS = 1e-6  # HF builds q_a_layernorm and kv_a_layernorm with RMSNorm's default eps, not rms_norm_eps


class MLAAttention(nn.Module):
    latent_eps = None   # q_a_layernorm's and kv_a_layernorm's where not LATENT_NORM_EPS (Hy V4 VL's)

    def __init__(self, config: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        c, m = config, config.mla
        self.layer_id, self.attn_backend = layer_id, attn_backend
        self.num_heads, self.m = c.num_heads, m
        self.q_rows = m.q_lora_rank or c.num_heads * m.qk_head_dim   # q_a_proj's rows, or q_proj's
        self.qkv_a_proj = param(self.q_rows + m.kv_lora_rank + m.qk_rope_head_dim, c.hidden_size,
                                dtype=dtype, device=device)  # [Q + C + R, H]
        self.q_a_layernorm = param(m.q_lora_rank, dtype=dtype, device=device) if m.q_lora_rank else None  # [Q]
        self.q_b_proj = (param(c.num_heads * m.qk_head_dim, m.q_lora_rank, dtype=dtype, device=device)
                         if m.q_lora_rank else None)  # [Hq*(N+R), Q]
        self.kv_a_layernorm = param(m.kv_lora_rank, dtype=dtype, device=device)  # [C]
        self.kv_b_proj = param(c.num_heads, m.qk_nope_head_dim + m.v_head_dim, m.kv_lora_rank,
                               dtype=dtype, device=device)  # [Hq, N+Vd, C]
        self.o_proj = param(c.hidden_size, c.num_heads * m.v_head_dim, dtype=dtype, device=device)  # [H, Hq*Vd]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's [k_pe | latent] into the pool."""
        T, hq, m = x.shape[0], self.num_heads, self.m
        qkv_a = linear(x, self.qkv_a_proj)  # [T, Q + C + R]
        q, latent, k_pe = qkv_a.split([self.q_rows, m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
        q, gate = self.queries(q)  # [T, Hq, N+R], [T, Hq*Vd] or None
        q_nope, q_pe = q.split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)  # [T, Hq, N], [T, Hq, R]
        w_uk, w_uv = self.kv_b_proj.split([m.qk_nope_head_dim, m.v_head_dim], dim=1)  # [Hq, N, C], [Hq, Vd, C]
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [T, Hq, C]
        kv = torch.cat((k_pe, self.latent_norm(latent, self.kv_a_layernorm)), dim=-1)  # [T, R + C]
        qk = torch.cat((torch.cat((q_pe, q_latent), dim=-1), kv.unsqueeze(1)), dim=1)  # [T, Hq+1, R + C]
        qk = rotary.apply_(qk)  # [T, Hq+1, R + C]: the first R dims of each head rotate
        if rotary.query_scale is not None:   # Mistral 4: HF scales [q_nope | q_pe], so the whole absorbed query
            qk[:, :hq] *= rotary.query_scale  # [T, Hq, R + C] times [T, 1, 1]
        k = qk[:, hq:]  # [T, 1, R + C]
        o = self.attn_backend.forward(qk[:, :hq], k, k, self.layer_id, fb)  # [T, Hq, R + C]
        o = torch.bmm(o[..., m.qk_rope_head_dim:].transpose(0, 1), w_uv.transpose(1, 2))  # [Hq, T, Vd]
        o = o.transpose(0, 1).reshape(T, hq * m.v_head_dim)  # [T, Hq*Vd]
        if gate is not None:
            o = (o * torch.sigmoid(gate.float())).to(o.dtype)  # [T, Hq*Vd]
        return linear(o, self.o_proj)  # [T, H]

    def latent_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, weight, self.latent_eps or LATENT_NORM_EPS)

    def queries(self, q_a: torch.Tensor):
        """q_a [T, Q] (q_a_proj's output; q_proj's [T, Hq*(N+R)] without q_lora_rank) -> (the queries [T, Hq, N+R],
        the output's gate [T, Hq*Vd] before its sigmoid, or None: A.X K2's, dsa.py)."""
        if self.q_b_proj is not None:
            q_a = linear(self.latent_norm(q_a, self.q_a_layernorm), self.q_b_proj)  # [T, Hq*(N+R)]
        return q_a.view(q_a.shape[0], self.num_heads, self.m.qk_head_dim), None  # [T, Hq, N+R]
