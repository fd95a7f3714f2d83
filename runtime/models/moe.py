"""The sparse mixture-of-experts MLP: router, top-k routing, experts grouped by expert, shared expert, load counts.

route() (moe_router.py) follows each family's HF rule (moe_config.py).  The experts of one layer are two stacked
weights, w13 [E, 2I, H] (gate rows, then up rows) and w2 [E, H, I].  On CUDA they run as the fused Triton kernel
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
from .moe_router import route
from .packed_linear import linear


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
    """A sparse layer's MLP: forward(x [T, H]) -> [T, H]; counts every token's chosen experts in expert_tokens.

    Any decoder layer can hold it (LlamaDecoderLayer's mlp, DeepSeek's): it needs only x and, for tensor or expert
    parallelism, `tp` set; checkpoint_targets(prefix) names its weights in the HF layout."""

    def __init__(self, hidden_size: int, moe: MoEConfig, dtype, device):
        """moe: this rank's view (sharding.shard_config): its experts, and its share of each expert's width."""
        super().__init__()
        e, inter, shared = moe.local_experts, moe.intermediate_size, moe.shared_expert_intermediate_size

        def param(*shape, dtype=dtype):
            return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)

        self.moe, self.expert_offset = moe, moe.expert_offset
        self.top_k = moe.top_k
        router_dtype = torch.float32 if moe.router_float32 else dtype
        self.gate = param(moe.num_experts, hidden_size, dtype=router_dtype)   # [E_all, H] router
        self.correction_bias = param(moe.num_experts, dtype=torch.float32) if moe.correction_bias else None  # [E_all]
        self.w13 = param(e, 2 * inter, hidden_size)                           # [E, 2I, H]
        self.w2 = param(e, hidden_size, inter)                                # [E, H, I]
        self.shared_gate_up = param(2 * shared, hidden_size) if shared else None    # [2S, H]
        self.shared_down = param(hidden_size, shared) if shared else None           # [H, S]
        self.shared_expert_gate = param(1, hidden_size) if shared and moe.shared_expert_gate else None   # [1, H]
        # tokens routed to each expert since start (every rank routes every token, so rank 0's count is whole)
        self.register_buffer("expert_tokens", torch.zeros(moe.num_experts, dtype=torch.int64, device=device),
                             persistent=False)                                # [E_all]
        self.packed_experts = None   # (w13 list, w2 list) packed for the CPU GEMM: see MoEForCausalLM.pack_weights
        self.tp = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.experts_out(x, *self.choose(x))                           # [T, H]

    def choose(self, x: torch.Tensor):
        """x [T, H] -> (weights [T, k] float32, expert ids [T, k]), counted in expert_tokens."""
        if self.moe.router_float32:
            router_logits = F.linear(x.float(), self.gate)                    # [T, E_all] float32
        else:
            router_logits = linear(x, self.gate)                              # [T, E_all]
        weights, ids = route(router_logits, self.moe, self.correction_bias)   # [T, k] each
        flat_ids = ids.reshape(-1)                                            # [T*k]
        self.expert_tokens.index_add_(0, flat_ids, torch.ones_like(flat_ids))   # no host sync (CUDA graphs)
        return weights, ids

    def experts_out(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The chosen experts' weighted sum (ids of experts not held here add 0) plus the shared experts'."""
        if self.packed_experts is not None:
            out = grouped_experts(x, *self.packed_experts, weights, ids, self.expert_offset)   # [T, H]
        elif _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset)           # [T, H]
        else:
            out = grouped_experts(x, self.w13, self.w2, weights, ids, self.expert_offset)     # [T, H]
        if self.shared_gate_up is not None:
            shared = linear(silu_mul(linear(x, self.shared_gate_up)), self.shared_down)        # [T, H]
            if self.shared_expert_gate is not None:                                            # Qwen2-MoE
                shared = torch.sigmoid(F.linear(x, self.shared_expert_gate)) * shared         # [T, 1] * [T, H]
            out = out + shared
        return out if self.tp is None else self.tp.all_reduce(out)           # [T, H]

    def checkpoint_targets(self, prefix: str, expert_names=("gate_proj", "up_proj", "down_proj"),
                           bias_name="gate.e_score_correction_bias") -> dict:
        """HF name -> (destination, broadcast allowed) of this block's weights under `prefix` (e.g.
        "model.layers.3.mlp."): gate.weight [E, H], the correction bias [E] (bias_name; MiniMax-M2's sits beside
        the gate), experts.{e}.{gate, up, down}.weight (expert_names: Mixtral's w1, w3, w2), shared_expert.* and
        shared_expert_gate.weight (Qwen2-MoE) or shared_experts.* (DeepSeek style)."""
        gate, up, down = expert_names
        inter = self.w2.shape[2]
        t = {prefix + "gate.weight": (self.gate, False)}
        if self.correction_bias is not None:
            t[prefix + bias_name] = (self.correction_bias, False)
        for local in range(self.w13.shape[0]):
            e = self.expert_offset + local
            t[prefix + f"experts.{e}.{gate}.weight"] = (self.w13[local, :inter], False)
            t[prefix + f"experts.{e}.{up}.weight"] = (self.w13[local, inter:], False)
            t[prefix + f"experts.{e}.{down}.weight"] = (self.w2[local], False)
        if self.shared_gate_up is not None:
            shared, p = self.shared_down.shape[1], prefix + ("shared_expert." if self.shared_expert_gate is not None
                                                             else "shared_experts.")
            t[p + "gate_proj.weight"] = (self.shared_gate_up[:shared], False)
            t[p + "up_proj.weight"] = (self.shared_gate_up[shared:], False)
            t[p + "down_proj.weight"] = (self.shared_down, False)
        if self.shared_expert_gate is not None:
            t[prefix + "shared_expert_gate.weight"] = (self.shared_expert_gate, False)
        return t
