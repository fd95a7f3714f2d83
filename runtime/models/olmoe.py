"""OLMoE (HF OlmoeForCausalLM): the Llama decoder with a SparseMoeBlock in every layer (moe_model.py; Qwen's softmax
routing, not renormalised unless norm_topk_prob: moe_config.py), q/k RMSNorms over the whole q and k projections
(minimax_m2.py's), then q, k and v clamped to [-clip_qkv, clip_qkv] where the config sets it (HF's order: after the
norms, before rope; OLMo 1 clamps before any norm).  One rank, as MiniMax-M2.
Notation as in llama.py: T tokens, Hq/Hkv heads, D head_dim.
"""

import torch

from .llama import LlamaDecoderLayer
from .minimax_m2 import MiniMaxM2ForCausalLM, WholeWidthQKNormAttention
from .packed_linear import linear


class OlmoeAttention(WholeWidthQKNormAttention):
    def __init__(self, config, layer_id: int, attn_backend, dtype, device):
        super().__init__(config, layer_id, attn_backend, dtype, device)
        self.clip_after_norm, self.clip_qkv = config.clip_qkv, None   # None: no clamp before the norms (OLMo 1's)

    def forward(self, x: torch.Tensor, rotary, fb) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(t, hq + 2 * hkv, self.head_dim)
        qkv = torch.cat((self.norm_qk(qkv[:, :hq + hkv]), qkv[:, hq + hkv:]), dim=1)   # [T, Hq+2Hkv, D]
        if self.clip_after_norm is not None:
            qkv = qkv.clamp(-self.clip_after_norm, self.clip_after_norm)              # [T, Hq+2Hkv, D]
        qk = rotary.apply_(qkv[:, :hq + hkv])                                          # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)   # [T, Hq, D]
        return linear(o.reshape(t, self.q_size), self.o_proj, self.o_bias, self.gemm_rows)           # [T, H]


class OlmoeDecoderLayer(LlamaDecoderLayer):
    attention_class = OlmoeAttention


class OlmoeForCausalLM(MiniMaxM2ForCausalLM):
    """MoEForCausalLM's contract on one rank; Qwen's checkpoint names (mlp.gate, mlp.experts.{e}.*_proj)."""

    decoder_layer_class = OlmoeDecoderLayer
