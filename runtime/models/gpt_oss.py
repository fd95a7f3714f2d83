"""gpt-oss (HF GptOssForCausalLM): the Llama decoder with q/k/v/o biases, attention sinks, alternating sliding-window
and full layers (config.layer_windows), YaRN rope (rope.py), and a sparse MLP in every layer.

Attention sinks: a learned logit per query head that joins the softmax's denominator and takes no value; declared
with the windows to the attention backend (set_layer_variants), which hands them to every kernel (torch reference,
Triton, the native CPU kernels as their prior).  The router is linear with a bias; each token takes the top k of its
logits, weighted by a softmax over those k.  Experts have biases and a clamped SwiGLU (HF GptOssExperts):
gate = min(gate, limit), up = clamp(up, -limit, limit), out = (up + 1) * gate * sigmoid(alpha * gate).

Checkpoint layout (HF): experts.gate_up_proj [E, H, 2I] with gate and up interleaved in the last dim (gate at even
columns), gate_up_proj_bias [E, 2I] alike, down_proj [E, I, H], down_proj_bias [E, H]; our w13 [E, 2I, H] is
[gate rows; up rows] and w2 [E, H, I], so checkpoint_tensors transposes and de-interleaves them and renames the four
tensors experts.{w13, b13, w2, b2} (a stream already converted passes through unchanged).  Real checkpoints store the
expert weights in MXFP4 (`*_blocks` + `*_scales`, mxfp4.py), dequantized there to the model dtype.

Tensor parallelism (runtime/distributed/sharding.py) shards the converted stream: q/k/v rows (biases and sinks by
the rank's query heads), o_proj columns (its bias on rank 0), the router whole; the experts as the other MoE families:
each one's width split (w13/b13 rows of the rank's range in the gate and in the up half, w2 columns, b2 on rank 0) or,
with --ep-size, E/size whole experts with their biases; the block's output is all-reduced, so every bias counts once.
Notation: T tokens, H hidden, I expert width, E experts, k top k, Hq query heads.
"""

import logging
from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from .llama import LlamaDecoderLayer
from .moe import SparseMoeBlock, _use_triton, grouped_experts
from .moe_model import MoEForCausalLM
from .mxfp4 import dequantize_mxfp4
from .packed_linear import linear

logger = logging.getLogger(__name__)


def clamped_swiglu(gate_up: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    """gate_up [..., 2I] (gate columns, then up) -> [..., I], HF GptOssExperts._apply_gate."""
    half = gate_up.shape[-1] // 2
    gate = gate_up[..., :half].clamp(max=limit)                   # [..., I]
    up = gate_up[..., half:].clamp(min=-limit, max=limit)         # [..., I]
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))        # [..., I]


class GptOssMoeBlock(SparseMoeBlock):
    """SparseMoeBlock with a router bias, expert biases and the clamped SwiGLU; forward(x [T, H]) -> [T, H]."""

    def __init__(self, hidden_size: int, moe, dtype, device):
        super().__init__(hidden_size, moe, dtype, device)
        e, inter = moe.local_experts, moe.intermediate_size
        self.gate_bias = nn.Parameter(torch.empty(moe.num_experts, dtype=dtype, device=device),
                                      requires_grad=False)   # [E_all]
        self.b13 = nn.Parameter(torch.empty(e, 2 * inter, dtype=dtype, device=device), requires_grad=False)  # [E, 2I]
        self.b2 = nn.Parameter(torch.empty(e, hidden_size, dtype=dtype, device=device), requires_grad=False)  # [E, H]
        limit, alpha = moe.swiglu_limit, moe.swiglu_alpha
        self.act = lambda gate_up: clamped_swiglu(gate_up, limit, alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = linear(x, self.gate, self.gate_bias)                          # [T, E_all]
        top, ids = torch.topk(logits.float(), self.top_k, dim=-1)              # [T, k] each
        weights = torch.softmax(top, dim=-1)                                   # [T, k] float32
        flat_ids = ids.reshape(-1)                                             # [T*k]
        self.expert_tokens.index_add_(0, flat_ids, torch.ones_like(flat_ids))
        biases = dict(b13=self.b13, b2=self.b2, act=self.act)
        if self.packed_experts is not None:
            out = grouped_experts(x, *self.packed_experts, weights, ids, self.expert_offset, **biases)    # [T, H]
        elif _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset, **biases)            # [T, H]
        else:
            out = grouped_experts(x, self.w13, self.w2, weights, ids, self.expert_offset, **biases)      # [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)                                       # [T, H]


class GptOssForCausalLM(MoEForCausalLM):
    """LlamaForCausalLM's contract (tensor and expert parallelism included); every layer sparse; no FP8 checkpoints."""

    loads_fp8_checkpoints = False

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        for layer in self.layers:   # float32 whatever the model dtype: the kernels add them to float32 sums
            layer.self_attn.sinks = nn.Parameter(torch.empty(config.num_heads, dtype=torch.float32, device=device),
                                                 requires_grad=False)   # [Hq]
        attn_backend.set_layer_variants(config.layer_windows or [None] * config.num_layers,
                                        sinks=[layer.self_attn.sinks for layer in self.layers])

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        return LlamaDecoderLayer(c, layer_id, attn_backend, dtype, device,
                                 mlp=GptOssMoeBlock(c.hidden_size, c.moe, dtype, device))

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return "gpt-oss layers (sinks, mixture of experts) are not in the native one-call decode"

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            t[f"model.layers.{i}.self_attn.sinks"] = (layer.self_attn.sinks, False)
        return t

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        """Our layout's names (load_weights converts HF's expert tensors to it first)."""
        p = f"model.layers.{layer_id}.mlp."
        return {p + "router.weight": (mlp.gate, False), p + "router.bias": (mlp.gate_bias, False),
                p + "experts.w13": (mlp.w13, False), p + "experts.b13": (mlp.b13, False),
                p + "experts.w2": (mlp.w2, False), p + "experts.b2": (mlp.b2, False)}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """HF's stream with the expert tensors in our layout and names (MXFP4 blocks dequantized to the model dtype)."""
        return to_our_layout(named_tensors, self.dtype)


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] with gate and up interleaved in dim 1 (gate at even rows) -> [gate rows; up rows]."""
    return torch.cat((x[:, 0::2], x[:, 1::2]), dim=1)           # [E, 2I, ...]


_OUR_NAMES = {"experts.gate_up_proj": "experts.w13", "experts.gate_up_proj_bias": "experts.b13",
              "experts.down_proj": "experts.w2", "experts.down_proj_bias": "experts.b2"}


def _our_name(name: str) -> str:
    for hf, ours in _OUR_NAMES.items():
        if name.endswith("." + hf):
            return name[:-len(hf)] + ours
    return name


def to_our_layout(named_tensors, dtype):
    """HF gpt-oss names and layouts -> ours: gate_up_proj [E, H, 2I] -> w13 [E, 2I, H] de-interleaved, its bias
    -> b13 [E, 2I] de-interleaved, down_proj [E, I, H] -> w2 [E, H, I], its bias -> b2 [E, H]; `*_blocks` +
    `*_scales` (MXFP4) dequantized to dtype, already rows-first ([E, 2I, H] interleaved rows, [E, H, I])."""
    pending, dequantized = {}, 0
    for name, tensor in named_tensors:
        if name.endswith(("_blocks", "_scales")):
            base, part = name.rsplit("_", 1)
            pending.setdefault(base, {})[part] = tensor
            if len(pending[base]) < 2:
                continue
            parts = pending.pop(base)
            tensor, name, dequantized = dequantize_mxfp4(parts["blocks"], parts["scales"], dtype), base, dequantized + 1
        elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            tensor = tensor.transpose(1, 2)                                     # rows first: [E, 2I, H] / [E, H, I]
        if name.endswith("experts.gate_up_proj"):
            tensor = _deinterleave(tensor)                                      # [E, 2I, H] gate rows, then up
        elif name.endswith("experts.gate_up_proj_bias"):
            tensor = _deinterleave(tensor)                                      # [E, 2I]
        yield _our_name(name), tensor
    if pending:
        raise ValueError(f"MXFP4 weights without their blocks or scales: {sorted(pending)[:3]}")
    if dequantized:
        logger.info("gpt-oss: %d MXFP4 expert weights dequantized to %s at load", dequantized, dtype)
