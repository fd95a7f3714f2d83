"""Zyphra Zamba2 (HF Zamba2ForCausalLM; fields: zamba2_config.py): a Mamba-2 mixer (mamba2.py) in every layer,
x + mixer(norm(x + a)), where a hybrid layer's a is its shared transformer block's output through the layer's `linear`
(0 elsewhere).  A block (Zamba2Block) is attention over rmsnorm([x | embeddings]) then an MLP of its normed output,
without residuals, with the hybrid layer's own low-rank adapters added to q, k, v and gate_up; each hybrid layer keeps
its own KV in the pool, numbered among the hybrid layers.  Checkpoint names: layers.{i}.{input_layernorm, mamba.*} and
layers.{i}.{linear, mamba_decoder.{input_layernorm, mamba.*}, shared_transformer.*} (each block under its first
hybrid layer, or under all of them), model.final_layernorm.  No tensor parallelism, no native one-call decode, no FP8.
Notation: T tokens, H hidden, A = 2H the block's input, Hq heads of D dims (Hq D = A), I the MLP's width, r the rank.
"""

import re
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import mixer_targets
from .layer_ops import Rotary, rms_norm
from .layers import param
from .mamba2 import Mamba2Mixer
from .mamba2_hybrid import Mamba2HybridForCausalLM
from .packed_linear import linear

MIXER_NORM_EPS = 1e-5   # HF's gated norm epsilon, whatever rms_norm_eps is
_ACTIVATIONS = {"gelu": F.gelu, "silu": F.silu}


class Zamba2Block(nn.Module):
    """One shared transformer block: attention, then an MLP, each after an RMSNorm; adapters[str(slot)] holds the
    low-rank adapters of the hybrid layers (slots) that run it."""

    def __init__(self, c: ModelConfig, slots: tuple, attn_backend, dtype, device):
        super().__init__()
        H, A, D, I, r = c.hidden_size, 2 * c.hidden_size, c.head_dim, c.intermediate_size, c.shared_blocks.adapter_rank
        self.c, self.attn_backend, self.eps = c, attn_backend, c.rms_norm_eps
        self.q_size, self.kv_size = c.num_heads * D, c.num_kv_heads * D
        self.input_layernorm = param(A, dtype=dtype, device=device)  # [A]
        self.qkv_proj = param(self.q_size + 2 * self.kv_size, A, dtype=dtype, device=device)  # [(Hq+2Hkv)*D, A]
        self.o_proj = param(H, self.q_size, dtype=dtype, device=device)  # [H, Hq*D]
        self.pre_ff_layernorm = param(H, dtype=dtype, device=device)  # [H]
        self.gate_up_proj = param(2 * I, H, dtype=dtype, device=device)  # [2I, H]
        self.down_proj = param(H, I, dtype=dtype, device=device)  # [H, I]
        self.qkv_down = nn.ParameterDict({str(s): param(3, r, A, dtype=dtype, device=device) for s in slots} if r
                                         else {})  # [3, r, A] each: q, k, v
        self.qkv_up = nn.ParameterDict({str(s): param(3, A, r, dtype=dtype, device=device) for s in slots} if r
                                       else {})  # [3, A, r] each
        self.mlp_down = nn.ParameterDict({str(s): param(r, H, dtype=dtype, device=device) for s in slots} if r
                                         else {})  # [r, H] each
        self.mlp_up = nn.ParameterDict({str(s): param(2 * I, r, dtype=dtype, device=device) for s in slots} if r
                                       else {})  # [2I, r] each

    def forward(self, x: torch.Tensor, emb: torch.Tensor, slot: int, rotary: Optional[Rotary],
                fb: ForwardBatch) -> torch.Tensor:
        """x, emb: [T, H] -> [T, H]; writes hybrid layer `slot`'s K/V (pool layer `slot`)."""
        c, T, D, key = self.c, x.shape[0], self.c.head_dim, str(slot)
        h = rms_norm(torch.cat([x, emb], dim=1), self.input_layernorm, self.eps)  # [T, A]
        qkv = linear(h, self.qkv_proj)  # [T, (Hq+2Hkv)*D]
        adapted = c.shared_blocks.adapter_rank > 0
        if adapted:
            qkv = qkv + torch.einsum("jar,jrt->tja", self.qkv_up[key], torch.einsum("jra,ta->jrt", self.qkv_down[key],
                                                                                 h)).reshape(T, -1)  # [T, 3A]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=1)
        q, k, v = q.reshape(T, c.num_heads, D), k.reshape(T, c.num_kv_heads, D), v.reshape(T, c.num_kv_heads, D)
        if rotary is not None:
            q, k = rotary.apply_(q), rotary.apply_(k)
        o = self.attn_backend.forward(q, k, v, slot, fb)  # [T, Hq, D]
        h = rms_norm(linear(o.reshape(T, self.q_size), self.o_proj), self.pre_ff_layernorm, self.eps)  # [T, H]
        gate_up = linear(h, self.gate_up_proj)  # [T, 2I]
        if adapted:
            gate_up = gate_up + F.linear(F.linear(h, self.mlp_down[key]), self.mlp_up[key])  # [T, 2I]
        gate, up = gate_up.chunk(2, dim=1)
        return linear(_ACTIVATIONS[c.shared_blocks.mlp_act](gate) * up, self.down_proj)  # [T, H]

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) under `p` ("model.blocks.0.", a shared_transformer's)."""
        q, kv, w = self.q_size, self.kv_size, self.qkv_proj
        t = {p + "input_layernorm.weight": (self.input_layernorm, False),
             p + "pre_ff_layernorm.weight": (self.pre_ff_layernorm, False),
             p + "self_attn.q_proj.weight": (w[:q], False), p + "self_attn.k_proj.weight": (w[q:q + kv], False),
             p + "self_attn.v_proj.weight": (w[q + kv:], False), p + "self_attn.o_proj.weight": (self.o_proj, False),
             p + "feed_forward.gate_up_proj.weight": (self.gate_up_proj, False),
             p + "feed_forward.down_proj.weight": (self.down_proj, False)}
        for s in self.qkv_down:
            for j, name in enumerate("qkv"):
                a = p + f"self_attn.linear_{name}_adapter_list.{s}."
                t.update({a + "0.weight": (self.qkv_down[s][j], False), a + "1.weight": (self.qkv_up[s][j], False)})
            a = p + f"feed_forward.gate_up_proj_adapter_list.{s}."
            t.update({a + "0.weight": (self.mlp_down[s], False), a + "1.weight": (self.mlp_up[s], False)})
        return t


class Zamba2Layer(nn.Module):
    """x + mamba(norm(x + linear(block(x, emb)))) in a hybrid layer (block: shared, slot: this layer's place among the
    hybrid layers), x + mamba(norm(x)) in the others."""

    def __init__(self, c: ModelConfig, mamba: Mamba2Mixer, block: Optional[Zamba2Block], slot: Optional[int], dtype,
                 device):
        super().__init__()
        self.eps, self.mamba, self.block, self.slot = c.rms_norm_eps, mamba, block, slot
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.linear = param(c.hidden_size, c.hidden_size, dtype=dtype, device=device) if block is not None else None

    def forward(self, x: torch.Tensor, emb: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream, emb: [T, H] the token embeddings -> [T, H]."""
        h = x
        if self.block is not None:
            rope = rotary if self.block.c.nope_layers == () else None
            h = x + linear(self.block(x, emb, self.slot, rope, fb), self.linear)  # [T, H]
        return x + self.mamba(rms_norm(h, self.input_layernorm, self.eps), rotary, fb)  # [T, H]


class Zamba2ForCausalLM(Mamba2HybridForCausalLM):
    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, sb = self.config, self.config.shared_blocks
        if not hasattr(self, "blocks"):   # the first layer: the shared blocks, each with its slots' adapters
            n = len(sb.hybrid_layers)
            self.blocks = nn.ModuleList(Zamba2Block(c, tuple(range(b, n, sb.num_blocks)), attn_backend, dtype, device)
                                        for b in range(min(sb.num_blocks, n)))
        mixer = Mamba2Mixer(c.mamba2, layer_id, self.states, c.hidden_size, MIXER_NORM_EPS, dtype, device)
        if layer_id not in sb.hybrid_layers:
            return Zamba2Layer(c, mixer, None, None, dtype, device)
        slot = sb.hybrid_layers.index(layer_id)
        return Zamba2Layer(c, mixer, self.blocks[slot % sb.num_blocks], slot, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        self.attn_backend.init_forward_metadata(fb)
        x = emb = self.embed_inputs(fb)  # [T, H]
        rotary = Rotary(fb.positions, self.cos_sin)
        for layer in self.layers:
            x = layer(x, emb, rotary, fb)  # [T, H]
        return self.final_norm(x)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for block in self.blocks:
            swaps += [(block, name) for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]
        for layer in self.layers:
            swaps += [(layer.mamba, "in_proj"), (layer.mamba, "out_proj")]
            if layer.linear is not None:
                swaps.append((layer, "linear"))
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for b, block in enumerate(self.blocks):
            t.update(block.targets(f"model.blocks.{b}."))
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            if layer.block is not None:
                t[p + "linear.weight"] = (layer.linear, False)
                p += "mamba_decoder."
            t[p + "input_layernorm.weight"] = (layer.input_layernorm, False)
            t.update(self.mixer_targets(p + "mamba.", layer.mamba))
        return t

    def mixer_targets(self, p: str, mixer: nn.Module) -> dict:
        """A layer's mixer's weights under `p` ("model.layers.0.mamba.")."""
        return mixer_targets(p, mixer)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((self._our_name(name), tensor) for name, tensor in named_tensors)

    def _our_name(self, name: str) -> str:
        """model.final_layernorm -> model.norm; layers.{i}.shared_transformer. -> blocks.{its block}."""
        if name == "model.final_layernorm.weight":
            return "model.norm.weight"
        found = re.match(r"model\.layers\.(\d+)\.shared_transformer\.", name)
        if found is None:
            return name
        sb = self.config.shared_blocks
        block = sb.hybrid_layers.index(int(found.group(1))) % sb.num_blocks
        return f"model.blocks.{block}." + name[found.end():]
