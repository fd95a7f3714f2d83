"""MiniMax-Text-01 (HF MiniMaxForCausalLM; fields: linear_hybrid_config.py): lightning attention layers beside Mixtral's
rotary attention layers, each followed by Mixtral's experts.  A layer reads h = norm(x) and gives
h * alpha + sublayer(h) * beta twice (attention, then the experts on its normed result), (alpha, beta) of the
sublayer's kind (LightningAttention); plain RMSNorms.

Lightning attention: per head, q, k, v = silu(qkv_proj(x)) ([q | k | v] per head) and a state S [D, D] per request,
    S <- exp(-s) S + k_t v_t^T;   o_t = q_t S   (q unscaled)
with s the head's slope, 2 ** (-8 (h + 1) / heads) times (1 - layer / (layers - 1)) (both + 1e-5 as HF has them); the
heads' outputs are RMS-normed over all of them (epsilon 1e-6), times sigmoid(output_gate(x)), then out_proj.  Only the
attention layers have KV in the pool, numbered among themselves; the lightning layers keep their state per request row
(recurrent_state.py, no convolution).  No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from functools import partial
from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import attention_targets
from .hybrid_model import RecurrentHybridForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaAttention
from .packed_linear import linear
from .recurrent_state import RecurrentStates

CHUNK = 64
NORM_EPS = 1e-6   # HF's MiniMaxRMSNorm default: the lightning output norm's, whatever rms_norm_eps is


def slopes(layer: int, num_layers: int, num_heads: int) -> torch.Tensor:
    """Each head's decay rate in `layer` [Hl], float32 as HF computes it."""
    base = 1 / (2 ** (8 / num_heads))
    rate = base ** (torch.arange(num_heads) + 1)
    return rate * (1 - layer / (num_layers - 1 + 1e-5) + 1e-5)


def chunked(slope, q, k, v, state: torch.Tensor) -> torch.Tensor:
    """One request's tokens: q, k, v [T, Hl, D] float32, slope [Hl]; state [Hl, D, D] float32 updated in place.
    -> [T, Hl, D].  A chunk of C tokens at once: O = (Q K^T * W) V + (exp(-s (i + 1)) * Q) S0 with
    W[i, j] = exp(-s (i - j)) for j <= i, and S_C = exp(-s C) S0 + (exp(-s (C - 1 - j)) * K)^T V."""
    out = torch.empty_like(v)
    s = slope[:, None, None]  # [Hl, 1, 1]
    for start in range(0, q.shape[0], CHUNK):
        end = min(start + CHUNK, q.shape[0])
        qc, kc, vc = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [Hl, C, D] each
        n = end - start
        i = torch.arange(n, device=q.device, dtype=q.dtype)
        gap = i[:, None] - i[None, :]  # [C, C]
        W = torch.where(gap >= 0, torch.exp(-s * gap.clamp(min=0)), torch.zeros((), dtype=q.dtype, device=q.device))
        o = ((qc @ kc.transpose(1, 2)) * W) @ vc + (qc * torch.exp(-s * (i + 1)[:, None])) @ state  # [Hl, C, D]
        state.mul_(torch.exp(-s * n)).add_((kc * torch.exp(-s * (n - 1 - i)[:, None])).transpose(1, 2) @ vc)
        out[start:end] = o.transpose(0, 1)
    return out


def recurrent_step(slope, q, k, v, states: torch.Tensor) -> torch.Tensor:
    """One token of each of B requests: q, k, v [B, Hl, D] float32; states [B, Hl, D, D] (a copy: the caller writes it
    back).  -> [B, Hl, D]."""
    states.mul_(torch.exp(-slope)[None, :, None, None]).add_(k[:, :, :, None] * v[:, :, None, :])
    return (q[:, :, :, None] * states).sum(-2)


class LightningAttention(nn.Module):
    LINEARS = ("qkv_proj", "output_gate", "out_proj")   # the weights pack_weights packs

    def __init__(self, c: ModelConfig, layer_id: int, states: RecurrentStates, dtype, device):
        super().__init__()
        heads, D = c.lightning.num_heads, c.head_dim
        self.index, self.states, self.heads, self.head_dim = c.lightning.linear_layers.index(layer_id), states, heads, D
        self.qkv_proj = param(3 * heads * D, c.hidden_size, dtype=dtype, device=device)  # [3 Hl D, H]
        self.output_gate = param(heads * D, c.hidden_size, dtype=dtype, device=device)  # [Hl D, H]
        self.out_proj = param(c.hidden_size, heads * D, dtype=dtype, device=device)  # [H, Hl D]
        self.norm = param(heads * D, dtype=dtype, device=device)  # [Hl D]
        self.register_buffer("slope", slopes(layer_id, c.num_layers, heads).to(device), persistent=False)  # [Hl]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] (the normed stream) -> [T, H]; advances each request's state by its new tokens."""
        T, Hl, D = x.shape[0], self.heads, self.head_dim
        qkv = F.silu(linear(x, self.qkv_proj)).view(T, Hl, 3 * D).float()  # [T, Hl, 3D]
        q, k, v = qkv.split(D, dim=2)  # [T, Hl, D] each
        o = self.states.scan(self.index, partial(chunked, self.slope), partial(recurrent_step, self.slope), q, k, v)
        o = rms_norm(o.to(x.dtype).reshape(T, Hl * D), self.norm, NORM_EPS)  # [T, Hl D]
        return linear(torch.sigmoid(linear(x, self.output_gate)) * o, self.out_proj)  # [T, H]


class MiniMaxLayer(nn.Module):
    """h = norm(x); x = h * alpha + mixer(h) * beta; h = norm(x); h * alpha' + mlp(h) * beta'."""

    def __init__(self, c: ModelConfig, mixer: nn.Module, mlp: nn.Module, factors: tuple, dtype, device):
        super().__init__()
        self.eps, self.mixer, self.mlp = c.rms_norm_eps, mixer, mlp
        self.factors, self.mlp_factors = factors, c.lightning.mlp_factors
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] stream -> [T, H]."""
        h = rms_norm(x, self.input_layernorm, self.eps)  # [T, H]
        x = _weighted(h, self.mixer(h, rotary, fb), self.factors)  # [T, H]
        h = rms_norm(x, self.post_attention_layernorm, self.eps)  # [T, H]
        return _weighted(h, self.mlp(h), self.mlp_factors)  # [T, H]


def _weighted(h: torch.Tensor, out: torch.Tensor, factors: tuple) -> torch.Tensor:
    alpha, beta = factors
    return (h if alpha == 1.0 else h * alpha) + (out if beta == 1.0 else out * beta)


class MiniMaxForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with lightning attention and Mixtral's attention and experts."""

    LAYER_KIND = "hybrid (lightning attention)"
    TP_REASON = " (its lightning attention layers run on one rank)"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.declare_attention_windows()

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        lt = config.lightning
        return RecurrentStates(len(lt.linear_layers), 0, 1, (lt.num_heads, config.head_dim, config.head_dim), dtype,
                               device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, lt = self.config, self.config.lightning
        if layer_id in lt.linear_layers:
            mixer, factors = LightningAttention(c, layer_id, self.states, dtype, device), lt.linear_factors
        else:
            mixer, factors = LlamaAttention(c, self.kv_layer(layer_id), attn_backend, dtype, device), lt.full_factors
        return MiniMaxLayer(c, mixer, self.make_mlp(layer_id, dtype, device), factors, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer = f"model.layers.{i}.", layer.mixer
            t.update(self._norm_targets(p, layer))
            if isinstance(mixer, LightningAttention):
                t.update({p + f"self_attn.{name}.weight": (getattr(mixer, name), False)
                          for name in mixer.LINEARS + ("norm",)})
            else:
                t.update(attention_targets(p + "self_attn.", mixer))
            t.update(layer.mlp.checkpoint_targets(p + "block_sparse_moe.", ("w1", "w3", "w2")))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """HF's decay buffers (slope_rate, query/key/diagonal_decay) skipped: the slopes are computed here."""
        super().load_weights((name, t) for name, t in named_tensors if not name.endswith(_DECAY_BUFFERS))


_DECAY_BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")
