"""Kimi Linear (HF KimiLinearForCausalLM; fields: linear_hybrid_config.py): Kimi delta attention (KDA) layers beside
DeepSeek-V3's latent attention (mla.py) with no position embedding at all, each in a pre-norm block with the dense
SwiGLU or DeepSeek-V3's experts (SparseMoeBlock); plain RMSNorms.

A KDA layer: q, k, v through a causal depthwise convolution of width K (SiLU), a log-decay per key channel
g = -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias), beta = sigmoid(b_proj(x)); the Kimi delta rule (kda_rule.py) per
head, RMS-normed (o_norm) and gated by sigmoid(g_b(g_a(x))), then o_proj.  A request's state (the last K - 1
convolution inputs and [H, D, D]) lives in its row (recurrent_state.py).  Checkpoint names as published (HF renames them
at load: forget_gate.*, conv1d, mlp.experts.gate_up_proj): self_attn.{f_a_proj, f_b_proj, dt_bias, A_log},
self_attn.{q,k,v}_conv1d, block_sparse_moe.* with experts' w1/w3/w2; HF's own names load too.
Only the latent attention layers have KV in the pool, numbered among themselves.
No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

import re
from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import mla_targets
from .gated_delta_rule import l2_normalized
from .hybrid_model import RecurrentHybridForCausalLM
from .kda_rule import chunked, recurrent_step
from .layer_ops import rms_norm
from .layers import param
from .mla import MLAAttention
from .moe import SparseMoeBlock
from .multimodal_text import split_stacked_experts
from .packed_linear import linear
from .qwen3_next import HybridLayer
from .recurrent_state import ConvWeight, RecurrentStates


class NoRotary:
    """The rotary of layers without position embeddings."""

    query_scale = None

    def apply_(self, x: torch.Tensor) -> torch.Tensor:
        return x


class KimiLatentAttention(MLAAttention):
    @property
    def LINEARS(self) -> tuple:   # the weights pack_weights packs
        return ("qkv_a_proj", "o_proj") + (("q_b_proj",) if self.q_b_proj is not None else ())


class KimiDeltaAttention(nn.Module):
    LINEARS = ("in_proj", "f_b_proj", "g_b_proj", "o_proj")   # the weights pack_weights packs

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        """index: this layer's place among the KDA layers (its slice of `states`)."""
        super().__init__()
        kd = c.kimi_delta
        self.kd, self.index, self.states, self.eps = kd, index, states, c.rms_norm_eps
        H, D, V = kd.num_heads, kd.head_dim, kd.num_heads * kd.head_dim
        self.in_proj = param(3 * V + H + 2 * D, c.hidden_size, dtype=dtype, device=device)  # q k v | b | f_a | g_a
        self.conv_weight = param(3 * V, kd.conv_kernel, dtype=dtype, device=device)  # [3V, K]
        self.f_b_proj = param(V, D, dtype=dtype, device=device)  # [V, D]
        self.g_b_proj = param(V, D, dtype=dtype, device=device)  # [V, D]
        self.dt_bias = param(V, dtype=torch.float32, device=device)  # [V]
        self.A_log = param(H, dtype=torch.float32, device=device)  # [H]
        self.o_norm = param(D, dtype=dtype, device=device)  # [D]
        self.o_proj = param(c.hidden_size, V, dtype=dtype, device=device)  # [hidden, V]

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]; advances each request's state by its new tokens."""
        T, H, D = x.shape[0], self.kd.num_heads, self.kd.head_dim
        V = H * D
        qkv, b, f_a, g_a = linear(x, self.in_proj).split([3 * V, H, D, D], dim=1)
        q, k, v = self.states.convolve(self.index, qkv, self.conv_weight, None).split(V, dim=1)  # [T, V] each
        q, k = (l2_normalized(t.float().view(T, H, D)) for t in (q, k))  # [T, H, D] each
        q = q * D ** -0.5
        g = F.softplus(linear(f_a, self.f_b_proj).float() + self.dt_bias.float())  # [T, V]
        g = -self.A_log.float().exp()[:, None] * g.view(T, H, D)  # [T, H, D]
        beta = torch.sigmoid(b.float())  # [T, H]
        o = self.states.scan(self.index, chunked, recurrent_step, q, k, v.float().view(T, H, D), g, beta)  # [T, H, D]
        gate = linear(g_a, self.g_b_proj).float().view(T, H, D)  # [T, H, D]
        o = F.rms_norm(o, (D,), eps=self.eps) * self.o_norm.float() * torch.sigmoid(gate)  # [T, H, D]
        return linear(o.to(x.dtype).reshape(T, V), self.o_proj)  # [T, hidden]


class KimiLayer(HybridLayer):
    norm = staticmethod(rms_norm)


class KimiLinearForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with KDA and position-free latent attention."""

    LAYER_KIND = "hybrid (Kimi delta attention)"
    TP_REASON = " (its KDA layers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        kd = config.kimi_delta
        return RecurrentStates(len(kd.linear_layers), kd.conv_dim, kd.conv_kernel,
                               (kd.num_heads, kd.head_dim, kd.head_dim), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c, kd = self.config, self.config.kimi_delta
        if layer_id in kd.linear_layers:
            mixer = KimiDeltaAttention(c, kd.linear_layers.index(layer_id), self.states, dtype, device)
        else:
            mixer = KimiLatentAttention(c, self.kv_layer(layer_id), attn_backend, dtype, device)
        return KimiLayer(c, mixer, self.make_mlp(layer_id, dtype, device), dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        return [NoRotary()] * len(self.layers)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer = f"model.layers.{i}.", layer.mixer
            t.update(self._norm_targets(p, layer))
            t.update(_delta_targets(p + "self_attn.", mixer) if isinstance(mixer, KimiDeltaAttention)
                     else mla_targets(p + "self_attn.", mixer))
            t.update(layer.mlp.checkpoint_targets(p + "mlp.") if isinstance(layer.mlp, SparseMoeBlock)
                     else self._mlp_targets(i, layer.mlp))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        c = self.config
        super().load_weights(pair for name, tensor in named_tensors for pair in _our_names(name, tensor, c))


def _delta_targets(p: str, net: KimiDeltaAttention) -> dict:
    kd, w, conv = net.kd, net.in_proj, net.conv_weight
    H, D, V = kd.num_heads, kd.head_dim, kd.num_heads * kd.head_dim
    rows = {"q_proj": (0, V), "k_proj": (V, 2 * V), "v_proj": (2 * V, 3 * V), "b_proj": (3 * V, 3 * V + H),
            "f_a_proj": (3 * V + H, 3 * V + H + D), "g_a_proj": (3 * V + H + D, 3 * V + H + 2 * D)}
    t = {p + f"{name}.weight": (w[lo:hi], False) for name, (lo, hi) in rows.items()}
    t.update({p + f"{x}_conv1d.weight": (ConvWeight(conv[n * V:(n + 1) * V]), False) for n, x in enumerate("qkv")})
    t.update({p + "f_b_proj.weight": (net.f_b_proj, False), p + "g_b_proj.weight": (net.g_b_proj, False),
              p + "dt_bias": (net.dt_bias, False), p + "A_log": (net.A_log.view(1, 1, H, 1), False),
              p + "o_norm.weight": (net.o_norm, False), p + "o_proj.weight": (net.o_proj, False)})
    return t


_EXPERT = re.compile(r"\.experts\.(\d+)\.w([123])\.weight$")
_EXPERT_NAMES = {"1": "gate_proj", "2": "down_proj", "3": "up_proj"}


def _our_names(name: str, tensor: torch.Tensor, config: ModelConfig):
    """One checkpoint tensor under the names _weight_targets gives: the MoE block as mlp, experts' w1/w3/w2 as
    gate/up/down_proj, the forget gate's weights beside the attention's, HF's concatenated conv1d split into q/k/v;
    HF's stacked experts split (split_stacked_experts)."""
    name = name.replace(".block_sparse_moe.", ".mlp.").replace(".self_attn.forget_gate.", ".self_attn.")
    name = _EXPERT.sub(lambda m: f".experts.{m.group(1)}.{_EXPERT_NAMES[m.group(2)]}.weight", name)
    if name.endswith(".self_attn.conv1d.weight"):
        for x, part in zip("qkv", tensor.split(config.kimi_delta.num_heads * config.kimi_delta.head_dim)):
            yield name.replace("conv1d", f"{x}_conv1d"), part
        return
    yield from split_stacked_experts(name, tensor, config)
