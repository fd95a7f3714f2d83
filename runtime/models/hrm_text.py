"""HRM-Text (HF HrmTextForCausalLM): two stacks of Llama layers, L and H, run in cycles (hrm_text_config.py):
z_H = the embeddings times embedding_scale, z_L = z_L_init on every token; H_cycles times, L_cycles runs of
z_L = L(z_L + z_H), then z_H = H(z_H + z_L); the logits lm_head(z_H).  A stack: pre-norm layers x + attn(norm(x)),
then x + mlp(norm(x)), and a final norm, every norm an RMSNorm without weight (in float32); attention multi-head
with q/k/v/o biases (attention_bias), rope on every layer, and sigmoid(gate_proj(x)) times its output channels before
o_proj; the SwiGLU MLP (mlp_bias).  Each run of each layer writes its own KV layer (HrmCycles.slot).

Checkpoint names: model.{L,H}_module.layers.{i}.self_attn.{q,k,v,o,gate}_proj, .mlp.{gate,up,down}_proj,
model.z_L_init, model.embed_tokens, lm_head; or, as the hub's checkpoints and transformers' save_pretrained write the
weights, attn.gqkv_proj.weight ([gate; q; k; v] rows), attn.o_proj and mlp.gate_up_proj.weight ([gate; up] rows),
split at load (hf_names).  On one rank, op by op (own_layers.py).
Notation as in llama.py: T tokens, H hidden, Hq heads, D head_dim.
"""

import dataclasses
from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear

STACKS = ("L_module", "H_module")


def weightless_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] over its RMS, in float32, cast back (HF Llama4TextWeightlessRMSNorm)."""
    f = x.float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)  # [..., H]


class GatedAttention(LlamaAttention):
    """LlamaAttention whose output [T, Hq*D] is multiplied by sigmoid(gate_proj(x)) before o_proj; its KV layer given
    per call (`slot`)."""

    def __init__(self, config: ModelConfig, attn_backend, dtype, device):
        super().__init__(config, 0, attn_backend, dtype, device)
        self.gate_proj = param(self.q_size, config.hidden_size, dtype=dtype, device=device)  # [Hq*D, H]
        self.gate_bias = param(self.q_size, dtype=dtype, device=device) if config.attention_bias else None  # [Hq*D]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch, slot: int) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes KV layer `slot`."""
        T, hq = x.shape[0], self.num_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(T, 3 * hq, self.head_dim)  # [T, 3Hq, D]
        qk = rotary.apply_(qkv[:, :2 * hq])  # [T, 2Hq, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, 2 * hq:], slot, fb)  # [T, Hq, D]
        return linear(o.reshape(T, self.q_size) * self.gate(x), self.o_proj, self.o_bias)  # [T, H]

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """sigmoid(gate_proj(x)): x [T, H] -> [T, Hq*D]."""
        return torch.sigmoid(linear(x, self.gate_proj, self.gate_bias))  # [T, Hq*D]


class HrmLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); norms without weights."""

    def __init__(self, config: ModelConfig, attn_backend, dtype, device):
        super().__init__()
        self.eps = config.rms_norm_eps
        self.self_attn = GatedAttention(config, attn_backend, dtype, device)
        self.mlp = LlamaMLP(config, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch, slot: int) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        x = x + self.self_attn(weightless_rms_norm(x, self.eps), rotary, fb, slot)  # [T, H]
        return x + self.mlp(weightless_rms_norm(x, self.eps))  # [T, H]


class HrmTextForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract; self.layers: the L stack's layers, then the H stack's; config.num_layers the KV
    layers (one per run of a layer)."""

    LAYER_KIND = "recurrent-stack"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        stacks = dataclasses.replace(config, num_layers=2 * config.hrm.layers_per_stack)   # the layers with weights
        super().__init__(stacks, attn_backend, dtype=dtype, device=device, max_context=max_context)
        self.config = config
        self.z_l_init = param(config.hidden_size, dtype=dtype, device=device)  # [H]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return HrmLayer(self.config, attn_backend, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """The cycles; returns z_H [T, H] (the H stack's final norm applied)."""
        self.attn_backend.init_forward_metadata(fb)
        cycles, rotary = self.config.hrm, Rotary(fb.positions, self.cos_sin)
        z_h = self.embed_inputs(fb)  # [T, H]
        z_l = self.initial_low_state(z_h)  # [T, H]
        for high in range(cycles.high_cycles):
            for low in range(cycles.low_cycles):
                z_l = self.run_stack(0, z_l + z_h, rotary, fb, cycles.slot(high, low))  # [T, H]
            z_h = self.run_stack(1, z_h + z_l, rotary, fb, cycles.slot(high, cycles.low_cycles))  # [T, H]
        return z_h

    def initial_low_state(self, z_h: torch.Tensor) -> torch.Tensor:
        """z_L before the first cycle: z_L_init on every token of z_h [T, H]."""
        return self.z_l_init.expand_as(z_h)  # [T, H]

    def run_stack(self, stack: int, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch, first_slot: int) -> torch.Tensor:
        """Stack `stack` (0: L, 1: H) on x [T, H], its layers writing KV layers first_slot.. -> its final norm [T, H]."""
        n = self.config.hrm.layers_per_stack
        for i, layer in enumerate(self.layers[stack * n:(stack + 1) * n]):
            x = layer(x, rotary, fb, first_slot + i)  # [T, H]
        return weightless_rms_norm(x, self.config.rms_norm_eps)  # [T, H]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, name) for name in ("qkv_proj", "gate_proj", "o_proj")]
            swaps += [(layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return swaps

    def _weight_targets(self) -> dict:
        t = {"model.embed_tokens.weight": (self.embed_tokens, False), "model.z_L_init": (self.z_l_init, False)}
        if not self.config.tie_word_embeddings:
            t["lm_head.weight"] = (self.lm_head, False)
        n, q = self.config.hrm.layers_per_stack, self.config.num_heads * self.config.head_dim
        for k, layer in enumerate(self.layers):
            p, attn, mlp = f"model.{STACKS[k // n]}.layers.{k % n}.", layer.self_attn, layer.mlp
            parts = {"q_proj": (attn.qkv_proj, attn.qkv_bias, 0), "k_proj": (attn.qkv_proj, attn.qkv_bias, q),
                     "v_proj": (attn.qkv_proj, attn.qkv_bias, 2 * q), "gate_proj": (attn.gate_proj, attn.gate_bias, 0),
                     "o_proj": (attn.o_proj, attn.o_bias, None)}
            for name, (weight, bias, lo) in parts.items():
                rows = slice(None) if lo is None else slice(lo, lo + q)
                t[p + f"self_attn.{name}.weight"] = (weight[rows], False)
                if bias is not None:
                    t[p + f"self_attn.{name}.bias"] = (bias[rows], False)
            t.update(self._mlp_targets(0, mlp, prefix=p + "mlp."))
        return t

    def load_weights(self, named_tensors) -> None:
        super().load_weights(pair for name, tensor in named_tensors for pair in hf_names(name, tensor))

    def _mlp_targets(self, layer_id: int, mlp, prefix: str = "") -> dict:
        inter = mlp.down_proj.shape[1]
        t = {prefix + "gate_proj.weight": (mlp.gate_up_proj[:inter], False),
             prefix + "up_proj.weight": (mlp.gate_up_proj[inter:], False),
             prefix + "down_proj.weight": (mlp.down_proj, False)}
        return t | (self._mlp_bias_targets(prefix, mlp) if mlp.gate_up_bias is not None else {})


def hf_names(name: str, tensor: torch.Tensor) -> list:
    """One checkpoint tensor -> [(name, tensor)] in transformers' module names: the fused attn.gqkv_proj and
    mlp.gate_up_proj weights split in 4 and 2 along their rows, attn.o_proj renamed."""
    if name.endswith(".attn.gqkv_proj.weight"):
        prefix = name[:-len("attn.gqkv_proj.weight")] + "self_attn."
        return [(prefix + f"{part}_proj.weight", t) for part, t in zip(("gate", "q", "k", "v"), tensor.chunk(4))]
    if name.endswith(".mlp.gate_up_proj.weight"):
        prefix = name[:-len("gate_up_proj.weight")]
        return [(prefix + f"{part}_proj.weight", t) for part, t in zip(("gate", "up"), tensor.chunk(2))]
    return [(name.replace(".attn.o_proj.", ".self_attn.o_proj."), tensor)]
