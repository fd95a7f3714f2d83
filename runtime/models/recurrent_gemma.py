"""Google RecurrentGemma (HF RecurrentGemmaForCausalLM, Griffin; fields: recurrent_gemma_config.py).  Each layer is
r = x + temporal(norm(x)), then r + mlp(norm(r)), with (1 + weight) RMSNorms; the temporal block is an RG-LRU block
(GriffinRecurrentBlock) in the recurrent layers and local multi-query attention (LlamaAttention with an o_proj bias,
partial rotary, the window set as the backend's layer variant) in the others, whose KV alone is in the pool.  The MLP
is gelu-tanh gated with biases.  Embeddings times sqrt(hidden) in bfloat16; logits soft-capped.

The RG-LRU of a token x [W] (W = lru_width channels in G blocks of B): input gate i = sigmoid(x W_i + b_i) and
recurrence gate r = sigmoid(x W_r + b_r), block by block; log a = -8 r softplus(recurrent_param);
h = a * h_prev + sqrt(1 - a^2) * (i * x), where a token at position 0 has no a and no sqrt(1 - a^2) factor.  The
state h [W] (float32) and the convolution's last inputs are each request row's (recurrent_state.py).
Checkpoint names: model.layers.{i}.{temporal_pre_norm, temporal_block.*, channel_pre_norm, mlp_block.*},
model.final_norm.  No tensor parallelism, no native one-call decode, no FP8.
Notation: T tokens, H hidden, W lru_width, G blocks of B, K the convolution's width, I the MLP's width.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import Rotary
from .layers import gelu_tanh_mul, gemma_rms_norm, param
from .llama import LlamaAttention, LlamaMLP
from .packed_linear import linear
from .recurrent_state import ConvWeight, RecurrentStates

CHUNK = 64


class GriffinMLP(LlamaMLP):
    """LlamaMLP's weights and biases, gelu-tanh gated."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = linear(x, self.gate_up_proj, self.gate_up_bias)  # [T, 2I]
        return linear(gelu_tanh_mul(gate_up), self.down_proj, self.down_bias)  # [T, H]


class GriffinRecurrentBlock(nn.Module):
    LINEARS = ("linear_y", "linear_x", "linear_out")

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        """index: this layer's place among the recurrent layers (its slice of `states`)."""
        super().__init__()
        g = c.griffin
        H, W, G, K = c.hidden_size, g.lru_width, g.lru_heads, g.conv_kernel
        self.index, self.states, self.blocks = index, states, G
        self.linear_y, self.linear_x = (param(W, H, dtype=dtype, device=device) for _ in "yx")  # [W, H] each
        self.y_bias, self.x_bias = (param(W, dtype=dtype, device=device) for _ in "yx")  # [W] each
        self.linear_out = param(H, W, dtype=dtype, device=device)  # [H, W]
        self.out_bias = param(H, dtype=dtype, device=device)  # [H]
        self.conv_weight = param(W, K, dtype=dtype, device=device)  # [W, K]
        self.conv_bias = param(W, dtype=dtype, device=device)  # [W]
        self.recurrent_param = param(W, dtype=dtype, device=device)  # [W]
        self.gate_weight = param(2, G, W // G, W // G, dtype=dtype, device=device)  # [2, G, B, B]: input, recurrence
        self.gate_bias = param(2, G, W // G, dtype=dtype, device=device)  # [2, G, B]

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H]; advances each request's state by its new tokens."""
        T = x.shape[0]
        y = F.gelu(linear(x, self.linear_y, self.y_bias), approximate="tanh")  # [T, W]
        xs = self.states.convolve(self.index, linear(x, self.linear_x, self.x_bias), self.conv_weight,
                                  self.conv_bias, silu=False)  # [T, W]
        gates = torch.einsum("tgb,kgbc->ktgc", xs.view(T, self.blocks, -1), self.gate_weight)  # [2, T, G, B]
        gates = torch.sigmoid(gates + self.gate_bias[:, None]).reshape(2, T, -1)  # [2, T, W]
        log_a = -8.0 * gates[1] * F.softplus(self.recurrent_param)  # [T, W]
        first = self.first_tokens(fb)  # [T, 1]: no recurrence, no normalisation
        scale = torch.where(first, 1.0, torch.sqrt(1 - torch.exp(2 * log_a)))  # [T, W]
        b = (xs * gates[0] * scale.to(xs.dtype)).float()  # [T, W]
        a = torch.where(first, 0.0, torch.exp(log_a)).float()  # [T, W]
        h = self.states.scan(self.index, linear_recurrence, _recurrence_step, a, b)  # [T, W]
        return linear(h.to(x.dtype) * y, self.linear_out, self.out_bias)  # [T, H]

    @staticmethod
    def first_tokens(fb: ForwardBatch) -> torch.Tensor:
        """[T, 1]: whether each token is its sequence's first (HF resets the RG-LRU at position 0)."""
        return (fb.positions == 0)[:, None]

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) under `p` ("model.layers.0.temporal_block.")."""
        t = {p + "conv_1d.weight": (ConvWeight(self.conv_weight), False), p + "conv_1d.bias": (self.conv_bias, False),
             p + "rg_lru.recurrent_param": (self.recurrent_param, False)}
        for name, weight, bias in (("linear_y", self.linear_y, self.y_bias), ("linear_x", self.linear_x, self.x_bias),
                                   ("linear_out", self.linear_out, self.out_bias)):
            t.update({p + name + ".weight": (weight, False), p + name + ".bias": (bias, False)})
        for k, gate in enumerate(("input_gate", "recurrent_gate")):
            t[p + f"rg_lru.{gate}_weight"] = (self.gate_weight[k], False)
            t[p + f"rg_lru.{gate}_bias"] = (self.gate_bias[k], False)
        return t


def linear_recurrence(a: torch.Tensor, b: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t over one request's tokens, CHUNK at a time as a log-depth scan (Hillis-Steele; steps
    compose as (a1, b1) then (a2, b2) = (a2 a1, a2 b1 + b2)).  a, b: [T, W] float32; state [W] updated.  -> [T, W]."""
    out = torch.empty_like(b)
    for start in range(0, b.shape[0], CHUNK):
        ca, cb = a[start:start + CHUNK], b[start:start + CHUNK].clone()  # [L, W]
        cb[0] += ca[0] * state
        step = 1
        while step < cb.shape[0]:   # after it, cb[t] is h after token t
            cb = torch.cat([cb[:step], cb[step:] + ca[step:] * cb[:-step]])
            ca = torch.cat([ca[:step], ca[step:] * ca[:-step]])
            step *= 2
        state.copy_(cb[-1])
        out[start:start + CHUNK] = cb
    return out


def _recurrence_step(a: torch.Tensor, b: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """One token of each of R requests: a, b [R, W]; states [R, W] (a copy the caller writes back).  -> [R, W]."""
    states.mul_(a).add_(b)
    return states.clone()


class GriffinLayer(nn.Module):
    """x + temporal(norm(x)), then + mlp(norm(.)); temporal: a GriffinRecurrentBlock or a LlamaAttention."""

    def __init__(self, c: ModelConfig, temporal: nn.Module, dtype, device):
        super().__init__()
        self.eps, self.temporal_block = c.rms_norm_eps, temporal
        self.temporal_pre_norm, self.channel_pre_norm = (param(c.hidden_size, dtype=dtype, device=device) for _ in "tc")
        self.mlp_block = GriffinMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = gemma_rms_norm(x, self.temporal_pre_norm, self.eps)  # [T, H]
        if isinstance(self.temporal_block, GriffinRecurrentBlock):
            x = x + self.temporal_block(h, fb)  # [T, H]
        else:
            x = x + self.temporal_block(h, rotary, fb)  # [T, H]
        return x + self.mlp_block(gemma_rms_norm(x, self.channel_pre_norm, self.eps))  # [T, H]


class RecurrentGemmaForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "hybrid (RG-LRU)"
    TP_REASON = " (its RG-LRU blocks run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        g = config.griffin
        return RecurrentStates(len(g.recurrent_layers), g.lru_width, g.conv_kernel, (g.lru_width,), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        if layer_id in c.griffin.recurrent_layers:
            temporal = GriffinRecurrentBlock(c, c.griffin.recurrent_layers.index(layer_id), self.states, dtype, device)
        else:
            temporal = LlamaAttention(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return GriffinLayer(c, temporal, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            block = layer.temporal_block
            swaps += [(block, name) for name in getattr(block, "LINEARS", ("qkv_proj", "o_proj"))]
            swaps += [(layer.mlp_block, "gate_up_proj"), (layer.mlp_block, "down_proj")]
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, block = f"model.layers.{i}.", layer.temporal_block
            t[p + "temporal_pre_norm.weight"] = (layer.temporal_pre_norm, False)
            t[p + "channel_pre_norm.weight"] = (layer.channel_pre_norm, False)
            t.update(self._griffin_mlp_targets(p + "mlp_block.", layer.mlp_block))
            if isinstance(block, GriffinRecurrentBlock):
                t.update(block.targets(p + "temporal_block."))
                continue
            q, kv, qkv = block.q_size, block.kv_size, block.qkv_proj
            a = p + "temporal_block."
            t.update({a + "q_proj.weight": (qkv[:q], False), a + "k_proj.weight": (qkv[q:q + kv], False),
                      a + "v_proj.weight": (qkv[q + kv:], False), a + "o_proj.weight": (block.o_proj, False),
                      a + "o_proj.bias": (block.o_bias, False)})
            if block.qkv_bias is not None:
                t.update({a + "q_proj.bias": (block.qkv_bias[:q], False),
                          a + "k_proj.bias": (block.qkv_bias[q:q + kv], False),
                          a + "v_proj.bias": (block.qkv_bias[q + kv:], False)})
        return t

    def _griffin_mlp_targets(self, p: str, mlp: GriffinMLP) -> dict:
        inter = mlp.down_proj.shape[1]
        return {p + "gate_proj.weight": (mlp.gate_up_proj[:inter], False),
                p + "up_proj.weight": (mlp.gate_up_proj[inter:], False), p + "down_proj.weight": (mlp.down_proj, False),
                **self._mlp_bias_targets(p, mlp)}

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(("model.norm.weight" if name == "model.final_norm.weight" else name, tensor)
                             for name, tensor in named_tensors)
