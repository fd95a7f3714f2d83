"""The DeepSeek Sparse Attention families within index_topk tokens (dsa_config.py: there every token is chosen, so
dense multi-head latent attention is exact, and the context is capped there): DeepSeek-V3.2 and GLM-5
(DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM) run as DeepSeek-V3 (deepseek.py), always rotating interleaved pairs;
A.X K2 (AXK2ForCausalLM) adds three things:
  - the queries come from q_gate_proj (the checkpoint's q_b_proj) over [q_a_layernorm(q_a) | q_a] (the normed and the raw low-rank query), whose
    rows per head are the query's N + R, then a gate of Vd: the attention output times sigmoid(gate) before o_proj;
  - input_layernorm (every layer) and post_attention_layernorm (sparse layers) are gated RMSNorms,
    y * sigmoid(fc2(silu(fc1(y)))) with y = RMSNorm(x) and fc1 of rank gated_norm_rank;
  - routing without groups where n_group is None (moe_config.py).
The indexers' weights (self_attn.indexer.*) are read from the checkpoint and dropped: within index_topk they cannot
change the output.  Notation as in mla.py: T tokens, H hidden, Hq heads, N, R, Vd, Q q_lora_rank; Rg gated_norm_rank.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary, rms_norm
from .layers import param
from .mla import LATENT_NORM_EPS, MLAAttention
from .moe import SparseMoeBlock
from .packed_linear import linear

_INDEXER = ".self_attn.indexer."


class DsaForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM reading a checkpoint with indexers (DeepSeek-V3.2, GLM-5)."""

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """DeepseekForCausalLM's stream without the indexers' weights (unused within index_topk tokens)."""
        return super().checkpoint_tensors((name, t) for name, t in named_tensors if _INDEXER not in name)


class NormGate(nn.Module):
    """A.X K2's gate after an RMSNorm: y -> y * sigmoid(fc2(silu(fc1(y))))."""

    def __init__(self, hidden: int, rank: int, dtype, device):
        super().__init__()
        self.fc1 = param(rank, hidden, dtype=dtype, device=device)  # [Rg, H]
        self.fc2 = param(hidden, rank, dtype=dtype, device=device)  # [H, Rg]

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """y: [T, H] (normed) -> [T, H]."""
        gate = linear(F.silu(linear(y, self.fc1)), self.fc2)  # [T, H]
        return (y * torch.sigmoid(gate.float())).to(y.dtype)  # [T, H]


class AXK2Attention(MLAAttention):
    """MLA whose queries and output gate come from q_gate_proj (the module docstring)."""

    def __init__(self, config, layer_id: int, attn_backend, dtype, device):
        super().__init__(config, layer_id, attn_backend, dtype, device)
        m = config.mla
        self.q_b_proj = None
        self.q_gate_proj = param(config.num_heads * (m.qk_head_dim + m.v_head_dim), 2 * m.q_lora_rank,
                                 dtype=dtype, device=device)  # [Hq*(N+R+Vd), 2Q]

    def queries(self, q_a: torch.Tensor):
        """q_a [T, Q] -> (queries [T, Hq, N+R], gate [T, Hq*Vd])."""
        m = self.m
        q_in = torch.cat((rms_norm(q_a, self.q_a_layernorm, LATENT_NORM_EPS), q_a), dim=-1)  # [T, 2Q]
        q_gate = linear(q_in, self.q_gate_proj).view(q_a.shape[0], self.num_heads, -1)  # [T, Hq, N+R+Vd]
        q, gate = q_gate.split([m.qk_head_dim, m.v_head_dim], dim=-1)  # [T, Hq, N+R], [T, Hq, Vd]
        return q, gate.flatten(1)  # [T, Hq, N+R], [T, Hq*Vd]


class AXK2DecoderLayer(DeepseekDecoderLayer):
    """DeepSeek's layer with A.X K2's attention and gated norms (post_attention_gate on sparse layers only)."""

    attention_class = AXK2Attention

    def __init__(self, c, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__(c, layer_id, attn_backend, mlp, dtype, device)
        rank = c.dsa.gated_norm_rank
        self.input_gate = NormGate(c.hidden_size, rank, dtype, device)
        sparse = isinstance(mlp, SparseMoeBlock)
        self.post_attention_gate = NormGate(c.hidden_size, rank, dtype, device) if sparse else None

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.input_gate(rms_norm(x, self.input_layernorm, self.eps))  # [T, H]
        x = x + self.self_attn(h, rotary, fb)  # [T, H]
        h = rms_norm(x, self.post_attention_layernorm, self.eps)  # [T, H]
        if self.post_attention_gate is not None:
            h = self.post_attention_gate(h)  # [T, H]
        return x + self.mlp(h)  # [T, H]


class AXK2ForCausalLM(DsaForCausalLM):
    """DsaForCausalLM's contract with A.X K2's layers."""

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return AXK2DecoderLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device),
                                dtype, device)

    def _norm_targets(self, prefix: str, layer) -> dict:
        t = {prefix + "input_layernorm.norm.weight": (layer.input_layernorm, False)}
        t.update(_gate_targets(prefix + "input_layernorm.", layer.input_gate))
        if layer.post_attention_gate is None:
            t[prefix + "post_attention_layernorm.weight"] = (layer.post_attention_layernorm, False)
        else:
            t[prefix + "post_attention_layernorm.norm.weight"] = (layer.post_attention_layernorm, False)
            t.update(_gate_targets(prefix + "post_attention_layernorm.", layer.post_attention_gate))
        return t

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.q_gate_proj.weight"] = (layer.self_attn.q_gate_proj, False)
        return t

    def _linear_weights(self) -> list:
        return super()._linear_weights() + [(layer.self_attn, "q_gate_proj") for layer in self.layers]

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """DsaForCausalLM's stream with the checkpoint's fused q_b_proj (query and gate) named q_gate_proj, as HF
        names it, and each head's rope rows of it in rotate-half order."""
        m = self.config.mla
        n, r = m.qk_nope_head_dim, m.qk_rope_head_dim
        order = torch.cat([torch.arange(n), n + interleaved_to_half_order(r, r),
                           torch.arange(n + r, m.qk_head_dim + m.v_head_dim)])  # [N+R+Vd]
        renamed = ((name.replace(".self_attn.q_b_proj.", ".self_attn.q_gate_proj."), t) for name, t in named_tensors)
        for name, tensor in super().checkpoint_tensors(renamed):
            if name.endswith("self_attn.q_gate_proj.weight"):
                tensor = reorder_head_dims(name, tensor, order)  # [Hq*(N+R+Vd), 2Q]
            yield name, tensor


def _gate_targets(prefix: str, gate: NormGate) -> dict:
    """The checkpoint's names of a NormGate's weights (HF's fc1 and fc2)."""
    return {prefix + "W_down.weight": (gate.fc1, False), prefix + "W_up.weight": (gate.fc2, False)}
