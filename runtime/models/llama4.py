"""Llama 4 (Scout, Maverick) text model: the Llama decoder with Llama 4's attention and mixture of experts
(llama4_config.py reads the fields; Llama4ForConditionalGeneration's language model runs it through
multimodal_text.py).

Attention: rope layers rotate interleaved pairs (HF's complex rope), run as rotate-half with q and k rows reordered
at load (interleaved_rope.py), then L2-normalise q and k (use_qk_norm) and attend within their chunk of
attention_chunk_size tokens (the torch reference kernels' chunk variant, whatever the backend); NoPE layers attend
to everything, their queries scaled by position (attn_temperature_tuning).
Sparse layers: Llama4MoeBlock, whose experts take their input scaled by the sigmoid of the chosen router logits
(not their output, as SparseMoeBlock does), plus an unscaled shared expert.

Checkpoint names (HF's, turned into MoEForCausalLM's by checkpoint_tensors): feed_forward.router.weight [E, H],
feed_forward.experts.gate_up_proj [E, H, 2I] (gate columns first) and down_proj [E, I, H], feed_forward.shared_expert.*
and the dense layers' feed_forward.{gate,up,down}_proj.weight.
Notation: T tokens, H hidden, E experts, k top k, Hq/Hkv query/kv heads, D head_dim.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary, silu_mul
from .llama import LlamaAttention, LlamaDecoderLayer
from .moe import SparseMoeBlock, _use_triton, grouped_experts
from .moe_model import MoEForCausalLM
from .packed_linear import linear

_ROTATED = (".self_attn.q_proj.", ".self_attn.k_proj.")


def temperature_scale(positions: torch.Tensor, floor_scale: float, attn_scale: float) -> torch.Tensor:
    """positions [T] -> [T, 1, 1] float32: HF's attention temperature of the NoPE layers' queries."""
    scale = torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0  # [T]
    return scale.view(-1, 1, 1)


class Llama4Attention(LlamaAttention):
    def __init__(self, config, layer_id: int, attn_backend, dtype, device):
        super().__init__(config, layer_id, attn_backend, dtype, device)
        self.l2_norm = layer_id in config.llama4.qk_l2_norm_layers
        self.temperature = config.llama4.temperature if not self.rope else None

    def forward(self, x: torch.Tensor, rotary: Rotary, fb) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows).view(T, hq + 2 * hkv, d)  # [T, Hq+2Hkv, D]
        qk = qkv[:, :hq + hkv]  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        if self.l2_norm:
            qk = F.rms_norm(qk.float(), (d,), eps=self.eps).to(qk.dtype)  # [T, Hq+Hkv, D]
        if self.temperature is not None:
            qk[:, :hq] = (qk[:, :hq].float() * temperature_scale(fb.positions, *self.temperature)).to(qk.dtype)
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        out = linear(o.reshape(T, self.q_size), self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)  # [T, H]


class Llama4DecoderLayer(LlamaDecoderLayer):
    attention_class = Llama4Attention


class Llama4MoeBlock(SparseMoeBlock):
    """SparseMoeBlock's weights and contract, with Llama 4's routing: the top k router logits, their sigmoid
    scaling each chosen expert's input, the experts' outputs summed, plus the shared expert."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, hidden = x.shape
        top, ids = torch.topk(linear(x, self.gate), self.top_k, dim=1)            # [T, k] each
        scores = torch.sigmoid(top.float()).to(x.dtype)                             # [T, k]
        flat_ids = ids.reshape(-1, 1)                                               # [T*k, 1]
        self.expert_tokens.index_add_(0, flat_ids[:, 0], torch.ones_like(flat_ids[:, 0]))
        inputs = (x.unsqueeze(1) * scores.unsqueeze(2)).reshape(-1, hidden)        # [T*k, H] each choice's input
        ones = torch.ones(flat_ids.shape, dtype=torch.float32, device=x.device)    # [T*k, 1]
        if self.packed_experts is not None:
            routed = grouped_experts(inputs, *self.packed_experts, ones, flat_ids, self.expert_offset)   # [T*k, H]
        elif _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            routed = fused_moe(inputs, self.w13, self.w2, ones, flat_ids, self.expert_offset)          # [T*k, H]
        else:
            routed = grouped_experts(inputs, self.w13, self.w2, ones, flat_ids, self.expert_offset)    # [T*k, H]
        out = linear(silu_mul(linear(x, self.shared_gate_up)), self.shared_down)                      # [T, H]
        out = out + routed.view(t, self.top_k, hidden).sum(dim=1)                                      # [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)                                      # [T, H]


class Llama4ForCausalLM(MoEForCausalLM):
    """LlamaForCausalLM's contract (MoEForCausalLM's expert_load); chunked layers declared to the attention backend."""

    loads_fp8_checkpoints = False   # q/k rows reordered within each head would split block scales

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        l4 = config.llama4
        if l4.chunked_layers:
            attn_backend.set_layer_variants([None] * config.num_layers, chunks=[
                l4.chunk_size if i in l4.chunked_layers else None for i in range(config.num_layers)])

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        mlp = Llama4MoeBlock(c.hidden_size, c.moe, dtype, device) if layer_id in c.moe.sparse_layers else None
        return Llama4DecoderLayer(c, layer_id, attn_backend, dtype, device, mlp=mlp)

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """HF's Llama 4 names and layouts -> MoEForCausalLM's (mlp.*, per-expert weights), q and k rows in
        rotate-half order."""
        order = interleaved_to_half_order(self.config.head_dim, self.config.head_dim)
        for name, tensor in named_tensors:
            if any(p in name for p in _ROTATED):
                tensor = reorder_head_dims(name, tensor, order)
            yield from _moe_model_names(name, tensor)


def _moe_model_names(name: str, tensor: torch.Tensor):
    """One Llama 4 checkpoint tensor under MoEForCausalLM's names: the stacked experts (gate_up_proj [E, H, 2I],
    down_proj [E, I, H]) split into experts.{e}.{gate,up,down}_proj.weight ([I, H], [I, H], [H, I])."""
    prefix, _, rest = name.partition(".feed_forward.")
    if not rest:
        yield name, tensor
        return
    p = prefix + ".mlp."
    if rest in ("experts.gate_up_proj", "experts.down_proj"):
        for e, w in enumerate(tensor.transpose(1, 2)):   # w: [2I, H] or [H, I]
            if rest == "experts.down_proj":
                yield f"{p}experts.{e}.down_proj.weight", w
            else:
                yield f"{p}experts.{e}.gate_proj.weight", w[:w.shape[0] // 2]
                yield f"{p}experts.{e}.up_proj.weight", w[w.shape[0] // 2:]
        return
    if rest.startswith("router."):
        rest = "gate." + rest[len("router."):]
    elif rest.startswith("shared_expert."):
        rest = "shared_experts." + rest[len("shared_expert."):]
    yield p + rest, tensor
