"""Dory (HF DoryForCausalLM): a looped normalized transformer (nGPT) whose hidden states stay on the unit sphere
(dory_config.py: the sections, loops and KV layers).  L2(x) = x / sqrt(sum(x^2) + 1e-6), in float32.

Layer (Gemma 2's sandwich on the sphere): h = L2(x); h += |lambda_1 * a| * (L2(attn(h)) - h); h = L2(h);
h += |lambda_2 * a| * (L2(mlp(h)) - h), a = ngpt_alpha_init / initializer_range.
Attention: q, k L2-normed per head, rope (the layer kind's base), q times (sqk * sqrt(D) / r)^2 per channel, scores
scaled by D ** -0.5 (a window on sliding layers); the output times sigmoid(gate_proj(x) * (s_gate * H^0.25 / r)^2),
L2-normed over all heads, then o_proj (r: initializer_range).  MLP: down(L2(silu(gate * suv_gate * sqrt(H)) *
up * suv_up * sqrt(H))).  Model: the input layers; then, with z = L2(x), each loop x = L2(x) + z and the recurrent
layers; the output layers; L2; logits = lm_head(x) * logit_scale / r.

Checkpoint names: transformers' (model.layers.{i}.self_attn.{q,k,v,o,gate}_proj, sqk, s_gate, mlp.{gate,up,down}_proj,
suv_gate, suv_up, lambda_1, lambda_2, lm_head.logit_scale) or the released layout (backbone., embeddings, each layer as
blocks layers.{2i}.mixer (attention, attn_alpha) and layers.{2i+1}.mixer (MLP, mlp_alpha), g_proj), renamed at load
(hf_name).  On one rank, op by op.  Notation as in llama.py: T tokens, H hidden, I intermediate, Hq heads, D head_dim.
"""

import dataclasses
import re
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear
from .quant_linear import embed
from .rope import rope_cos_sin_cache


def l2_norm(x: torch.Tensor) -> torch.Tensor:
    """x [..., N] onto the unit sphere, in float32, cast back (HF DoryL2Norm)."""
    f = x.float()
    return (f * torch.rsqrt(f.pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)  # [..., N]


class DoryAttention(LlamaAttention):
    """nGPT attention; its KV layer given per call (`slot`)."""

    def __init__(self, c: ModelConfig, attn_backend, dtype, device):
        super().__init__(c, 0, attn_backend, dtype, device)
        r = c.dory.initializer_range
        self.gate_proj = param(self.q_size, c.hidden_size, dtype=dtype, device=device)  # [Hq*D, H]
        self.sqk = param(self.q_size, dtype=dtype, device=device)  # [Hq*D]
        self.s_gate = param(self.q_size, dtype=dtype, device=device)  # [Hq*D]
        self.sqk_scale, self.s_gate_scale = c.head_dim ** 0.5 / r, c.hidden_size ** 0.25 / r

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch, slot: int) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes KV layer `slot`."""
        T, hq, hkv, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = linear(x, self.qkv_proj).view(T, hq + 2 * hkv, d)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(l2_norm(qkv[:, :hq + hkv]))  # [T, Hq+Hkv, D]
        q = qk[:, :hq] * (self.sqk * self.sqk_scale).square().view(hq, d)  # [T, Hq, D]
        o = self.attn_backend.forward(q, qk[:, hq:], qkv[:, hq + hkv:], slot, fb).reshape(T, self.q_size)  # [T, Hq*D]
        o = o * torch.sigmoid(linear(x, self.gate_proj) * (self.s_gate * self.s_gate_scale).square())  # [T, Hq*D]
        return linear(l2_norm(o), self.o_proj)  # [T, H]


class DoryMLP(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        inter = c.intermediate_size
        self.gate_up_proj = param(2 * inter, c.hidden_size, dtype=dtype, device=device)  # [2I, H]
        self.down_proj = param(c.hidden_size, inter, dtype=dtype, device=device)  # [H, I]
        self.suv_gate, self.suv_up = (param(inter, dtype=dtype, device=device) for _ in range(2))  # [I] each
        self.suv_scale = c.hidden_size ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate, up = linear(x, self.gate_up_proj).chunk(2, dim=-1)  # [T, I] each
        h = F.silu(gate * (self.suv_gate * self.suv_scale)) * (up * (self.suv_up * self.suv_scale))  # [T, I]
        return linear(l2_norm(h), self.down_proj)  # [T, H]


class DoryLayer(nn.Module):
    def __init__(self, c: ModelConfig, attn_backend, dtype, device):
        super().__init__()
        self.self_attn = DoryAttention(c, attn_backend, dtype, device)
        self.mlp = DoryMLP(c, dtype, device)
        self.lambda_1, self.lambda_2 = (param(c.hidden_size, dtype=dtype, device=device) for _ in range(2))  # [H]
        self.lambda_scale = c.dory.alpha_init / c.dory.initializer_range

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch, slot: int) -> torch.Tensor:
        """x: [T, H] -> [T, H] (on the unit sphere)."""
        h = l2_norm(x)  # [T, H]
        h = h + (self.lambda_1 * self.lambda_scale).abs() * (l2_norm(self.self_attn(h, rotary, fb, slot)) - h)
        h = l2_norm(h)  # [T, H]
        return h + (self.lambda_2 * self.lambda_scale).abs() * (l2_norm(self.mlp(h)) - h)  # [T, H]


class DoryForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract; self.layers: the checkpoint's layers; config.num_layers: the KV layers."""

    LAYER_KIND = "looped nGPT"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        loops = config.dory
        layers = loops.input_layers + loops.recurrent_layers + loops.output_layers
        super().__init__(dataclasses.replace(config, num_layers=layers, layer_windows=()), attn_backend, dtype=dtype,
                         device=device, max_context=max_context)
        self.config = config
        attn_backend.set_layer_variants(config.layer_windows)   # per KV layer
        self.logit_scale = param(config.vocab_size, dtype=dtype, device=device)  # [V]
        self.bases = sorted(set(loops.layer_thetas))
        for k, base in enumerate(self.bases):
            cache = rope_cos_sin_cache(dataclasses.replace(config, rope_theta=base, rope_scaling=None),
                                       max_context or config.context_length)  # [C, D] float32
            self.register_buffer(f"cos_sin_{k}", cache.to(device=device, dtype=dtype), persistent=False)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return DoryLayer(self.config, attn_backend, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """The sections and loops; returns L2(x) [T, H]."""
        self.attn_backend.init_forward_metadata(fb)
        loops = self.config.dory
        rotaries = [Rotary(fb.positions, getattr(self, f"cos_sin_{k}")) for k in range(len(self.bases))]
        rotary = [rotaries[self.bases.index(base)] for base in loops.layer_thetas]
        first, last = loops.input_layers, loops.input_layers + loops.recurrent_layers
        x = embed(fb.input_ids, self.embed_tokens, self.dtype)  # [T, H]
        for i in range(first):
            x = self.layers[i](x, rotary[i], fb, i)  # [T, H]
        z = l2_norm(x)  # [T, H]
        for loop in range(loops.loops):
            x = self.loop_input(x, z)  # [T, H]
            for i in range(first, last):
                x = self.layers[i](x, rotary[i], fb, loops.slot(i, loop))  # [T, H]
        for i in range(last, len(self.layers)):
            x = self.layers[i](x, rotary[i], fb, i)  # [T, H]
        return l2_norm(x)  # [T, H]

    def loop_input(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """A loop's input: L2(x) + z, the input section's output z re-injected; [T, H] each."""
        return l2_norm(x) + z  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> lm_head(hidden) [N, V] float32 times logit_scale / initializer_range."""
        logits = linear(hidden, self.lm_head).float()  # [N, V]
        return logits * (self.logit_scale.float() * (1 / self.config.dory.initializer_range))  # [N, V]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, name) for name in ("qkv_proj", "gate_proj", "o_proj")]
            swaps += [(layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return swaps

    def _weight_targets(self) -> dict:
        t = {"model.embed_tokens.weight": (self.embed_tokens, False), "lm_head.logit_scale": (self.logit_scale, False)}
        if not self.config.tie_word_embeddings:
            t["lm_head.weight"] = (self.lm_head, False)
        q, kv = self.config.num_heads * self.config.head_dim, self.config.num_kv_heads * self.config.head_dim
        for i, layer in enumerate(self.layers):
            p, attn, mlp = f"model.layers.{i}.", layer.self_attn, layer.mlp
            inter = mlp.down_proj.shape[1]
            t.update({p + "lambda_1": (layer.lambda_1, False), p + "lambda_2": (layer.lambda_2, False),
                      p + "self_attn.q_proj.weight": (attn.qkv_proj[:q], False),
                      p + "self_attn.k_proj.weight": (attn.qkv_proj[q:q + kv], False),
                      p + "self_attn.v_proj.weight": (attn.qkv_proj[q + kv:], False),
                      p + "self_attn.o_proj.weight": (attn.o_proj, False),
                      p + "self_attn.gate_proj.weight": (attn.gate_proj, False),
                      p + "self_attn.sqk": (attn.sqk, False), p + "self_attn.s_gate": (attn.s_gate, False),
                      p + "mlp.gate_proj.weight": (mlp.gate_up_proj[:inter], False),
                      p + "mlp.up_proj.weight": (mlp.gate_up_proj[inter:], False),
                      p + "mlp.down_proj.weight": (mlp.down_proj, False),
                      p + "mlp.suv_gate": (mlp.suv_gate, False), p + "mlp.suv_up": (mlp.suv_up, False)})
        return t

    def load_weights(self, named_tensors) -> None:
        super().load_weights((hf_name(name), tensor) for name, tensor in named_tensors)


_BLOCK = re.compile(r"layers\.(\d+)\.(mixer|attn_alpha|mlp_alpha)(?=\.|$)")


def hf_name(name: str) -> str:
    """A checkpoint name in transformers' module names (its conversion mapping for Dory)."""
    match = _BLOCK.search(name)
    if match is not None:   # the released layout: layers.{2i} attention, layers.{2i+1} MLP
        index, block = int(match[1]), match[2]
        block = {"attn_alpha": "lambda_1", "mlp_alpha": "lambda_2"}.get(block, ("self_attn", "mlp")[index % 2])
        name = name[:match.start()] + f"layers.{index // 2}.{block}" + name[match.end():]
    name = re.sub(r"^backbone\.", "model.", name).replace(".embeddings.", ".embed_tokens.")
    return name.replace(".self_attn.g_proj.", ".self_attn.gate_proj.")
