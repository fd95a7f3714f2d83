"""The sparse mixture-of-experts MLP: router, top-k routing, experts grouped by expert, shared expert, load counts.

route() follows each family's HF rule (moe_config.py).  The experts of one layer are two stacked weights,
w13 [E, 2I, H] (gate rows, then up rows) and w2 [E, H, I].  On CUDA they run as the fused Triton kernel
(radixlm_kernels/triton_moe.py); elsewhere grouped_experts sorts the step's (token, choice) rows by expert and
calls expert_ffn once per expert that any token chose, with all of its rows: each expert's weights are read
once per step, however many tokens share it.

Parallelism (runtime/distributed/sharding.py): with expert parallelism a rank holds experts
expert_offset..expert_offset+E_local-1 whole; with tensor parallelism alone it holds I/size of every expert.
Either way every rank sees every token (attention ends in an all-reduce), routes all of them, computes its part
and the parts are summed by one all-reduce.  Notation: T tokens, H hidden, I expert width, E experts, k top k.
"""

import os

import torch
import torch.nn.functional as F
from torch import nn

from .layer_ops import silu_mul
from .moe_config import MoEConfig
from .packed_linear import linear


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool):
    """router_logits [T, E] -> (weights [T, k] float32, expert ids [T, k] int64): softmax over every expert in
    float32, the top k, renormalised to sum to 1 when `renormalize` (Mixtral: always; Qwen: norm_topk_prob)."""
    probs = torch.softmax(router_logits.float(), dim=-1)       # [T, E]
    weights, ids = torch.topk(probs, top_k, dim=-1)              # [T, k] each
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)    # [T, k]
    return weights, ids


def expert_ffn(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, b13=None, b2=None, act=None) -> torch.Tensor:
    """One expert's gated MLP on the rows routed to it: x [n, H], w13 [2I, H], w2 [H, I] (dense or packed), b13 [2I]
    and b2 [H] biases or None, act [n, 2I] -> [n, I] (None: silu(gate) * up) -> [n, H]."""
    return linear((act or silu_mul)(linear(x, w13, b13)), w2, b2)   # [n, 2I] -> [n, I] -> [n, H]


def grouped_experts(x, w13, w2, weights, ids, expert_offset: int = 0, b13=None, b2=None, act=None) -> torch.Tensor:
    """The experts this holder has (w13/w2 indexable by local expert: stacked tensors or lists of packed ones),
    grouped by expert; b13 [E, 2I] / b2 [E, H] their biases or None, act their gated activation (expert_ffn).
    x [T, H], weights/ids [T, k] -> [T, H]; rows routed to experts held elsewhere add 0."""
    t, k = ids.shape
    num_experts = len(w13)
    local = ids.reshape(-1) - expert_offset                                  # [T*k]
    key = torch.where((local >= 0) & (local < num_experts), local, torch.full_like(local, num_experts))  # [T*k]
    order = torch.argsort(key, stable=True)                                  # [T*k]: rows grouped by expert
    counts = torch.bincount(key, minlength=num_experts + 1).tolist()         # [E+1] on the host
    flat_weights = weights.reshape(-1)                                       # [T*k]
    out = torch.zeros_like(x)                                                # [T, H]
    start = 0
    for e in range(num_experts):
        n = counts[e]
        if n:
            rows = order[start:start + n]                                    # [n] flat rows of expert e
            tokens = rows // k                                               # [n]
            y = expert_ffn(x.index_select(0, tokens), w13[e], w2[e], None if b13 is None else b13[e],
                           None if b2 is None else b2[e], act)              # [n, H]
            out.index_add_(0, tokens, y * flat_weights[rows].unsqueeze(1).to(y.dtype))
        start += n
    return out


def _use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda and os.environ.get("RADIXLM_DISABLE_TRITON_MOE", "").strip() not in ("1", "true", "yes")


class SparseMoeBlock(nn.Module):
    """A sparse layer's MLP: forward(x [T, H]) -> [T, H]; counts every token's chosen experts in expert_tokens."""

    def __init__(self, hidden_size: int, moe: MoEConfig, dtype, device):
        """moe: this rank's view (sharding.shard_config): its experts, and its share of each expert's width."""
        super().__init__()
        e, inter, shared = moe.local_experts, moe.intermediate_size, moe.shared_expert_intermediate_size

        def param(*shape):
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.top_k, self.renormalize, self.expert_offset = moe.top_k, moe.norm_topk_prob, moe.expert_offset
        self.gate = param(moe.num_experts, hidden_size)                       # [E_all, H] router
        self.w13 = param(e, 2 * inter, hidden_size)                           # [E, 2I, H]
        self.w2 = param(e, hidden_size, inter)                                # [E, H, I]
        self.shared_gate_up = param(2 * shared, hidden_size) if shared else None    # [2S, H]
        self.shared_down = param(hidden_size, shared) if shared else None           # [H, S]
        self.shared_expert_gate = param(1, hidden_size) if shared else None         # [1, H]
        # tokens routed to each expert since start (every rank routes every token, so rank 0's count is whole)
        self.register_buffer("expert_tokens", torch.zeros(moe.num_experts, dtype=torch.int64, device=device),
                             persistent=False)                                # [E_all]
        self.packed_experts = None   # (w13 list, w2 list) packed for the CPU GEMM: see MoEForCausalLM.pack_weights
        self.tp = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        router_logits = linear(x, self.gate)                                  # [T, E_all]
        weights, ids = route(router_logits, self.top_k, self.renormalize)     # [T, k] each
        flat_ids = ids.reshape(-1)                                            # [T*k]
        self.expert_tokens.index_add_(0, flat_ids, torch.ones_like(flat_ids))   # no host sync (CUDA graphs)
        if self.packed_experts is not None:
            out = grouped_experts(x, *self.packed_experts, weights, ids, self.expert_offset)   # [T, H]
        elif _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset)           # [T, H]
        else:
            out = grouped_experts(x, self.w13, self.w2, weights, ids, self.expert_offset)     # [T, H]
        if self.shared_gate_up is not None:
            shared = linear(silu_mul(linear(x, self.shared_gate_up)), self.shared_down)        # [T, H]
            out = out + torch.sigmoid(F.linear(x, self.shared_expert_gate)) * shared          # [T, 1] * [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)           # [T, H]
