"""Kimi Linear and Ling 3 (HF KimiLinearForCausalLM, BailingHybridForCausalLM; fields: linear_hybrid_config.py): Kimi
delta attention (KDA) layers beside DeepSeek-V3's latent attention (mla.py; Kimi's with no position embedding at all,
Ling's rotary with a sigmoid gate per head), each in a pre-norm block with the dense SwiGLU or DeepSeek-V3's experts
(SparseMoeBlock); plain RMSNorms.

A KDA layer: q, k, v through a causal depthwise convolution of width K (SiLU), a log-decay per key channel from
f = f_b(f_a(x)) (Ling: f_proj(x)) + dt_bias, g = -exp(A_log) * softplus(f) (Ling's safe gate: bound * sigmoid(exp(A_log)
* f)), beta = sigmoid(b_proj(x)); the Kimi delta rule (kda_rule.py) per head, RMS-normed (o_norm) and gated by
sigmoid(g_b(g_a(x))) (Ling: g_proj(x)), then o_proj.  A request's state (the last K - 1 convolution inputs and
[H, D, D]) lives in its row (recurrent_state.py).  Checkpoint names as published (HF renames them at load): Kimi's
self_attn.{f_a_proj, f_b_proj, dt_bias, A_log}, self_attn.{q,k,v}_conv1d, block_sparse_moe.* with experts' w1/w3/w2;
Ling's word_embeddings, attention.* with dense for o_proj, gate.expert_bias; HF's own names load too.
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

from .deepseek import mla_checkpoint_tensors, mla_targets
from .gated_delta_rule import l2_normalized
from .hybrid_model import RecurrentHybridForCausalLM
from .kda_rule import chunked, recurrent_step
from .layer_ops import rms_norm
from .layers import param
from .mla import MLAAttention
from .moe import SparseMoeBlock
from .packed_linear import linear
from .qwen3_next import HybridLayer
from .recurrent_state import ConvWeight, RecurrentStates


class NoRotary:
    """The rotary of layers without position embeddings."""

    query_scale = None

    def apply_(self, x: torch.Tensor) -> torch.Tensor:
        return x


class KimiLatentAttention(MLAAttention):
    """MLA; Ling 3's output times sigmoid(g_proj(x)) per head."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.g_proj = param(c.num_heads, c.hidden_size, dtype=dtype, device=device) if c.kimi_delta.attention_gate else None
        self.gate = None   # this step's [T, Hq*Vd], for queries()

    @property
    def LINEARS(self) -> tuple:   # the weights pack_weights packs
        return ("qkv_a_proj", "o_proj") + (("q_b_proj",) if self.q_b_proj is not None else ())

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        if self.g_proj is not None:
            self.gate = linear(x, self.g_proj).repeat_interleave(self.m.v_head_dim, dim=1)  # [T, Hq*Vd]
        return super().forward(x, rotary, fb)

    def queries(self, q_a: torch.Tensor):
        return super().queries(q_a)[0], self.gate


class KimiDeltaAttention(nn.Module):
    @property
    def LINEARS(self) -> tuple:   # the weights pack_weights packs
        return ("in_proj", "o_proj") + (("f_b_proj", "g_b_proj") if self.kd.low_rank_gates else ())

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        """index: this layer's place among the KDA layers (its slice of `states`)."""
        super().__init__()
        kd = c.kimi_delta
        self.kd, self.index, self.states, self.eps = kd, index, states, c.rms_norm_eps
        H, D, V = kd.num_heads, kd.head_dim, kd.num_heads * kd.head_dim
        self.rank = D if kd.low_rank_gates else V   # the gates' inputs: f_a, g_a (Ling: f, g themselves)
        self.in_proj = param(3 * V + H + 2 * self.rank, c.hidden_size, dtype=dtype, device=device)  # q k v | b | f | g
        self.conv_weight = param(3 * V, kd.conv_kernel, dtype=dtype, device=device)  # [3V, K]
        self.f_b_proj = param(V, D, dtype=dtype, device=device) if kd.low_rank_gates else None  # [V, D]
        self.g_b_proj = param(V, D, dtype=dtype, device=device) if kd.low_rank_gates else None  # [V, D]
        self.dt_bias = param(V, dtype=torch.float32, device=device)  # [V]
        self.A_log = param(H, dtype=torch.float32, device=device)  # [H]
        self.o_norm = param(D, dtype=dtype, device=device)  # [D]
        self.o_proj = param(c.hidden_size, V, dtype=dtype, device=device)  # [hidden, V]

    def forward(self, x: torch.Tensor, rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]; advances each request's state by its new tokens."""
        T, H, D = x.shape[0], self.kd.num_heads, self.kd.head_dim
        V = H * D
        qkv, b, f, gate = linear(x, self.in_proj).split([3 * V, H, self.rank, self.rank], dim=1)
        q, k, v = self.states.convolve(self.index, qkv, self.conv_weight, None).split(V, dim=1)  # [T, V] each
        q, k = (l2_normalized(t.float().view(T, H, D)) for t in (q, k))  # [T, H, D] each
        q = q * D ** -0.5
        if self.f_b_proj is not None:
            f, gate = linear(f, self.f_b_proj), linear(gate, self.g_b_proj)  # [T, V] each
        f = (f.float() + self.dt_bias.float()).view(T, H, D)  # [T, H, D]
        rate = self.A_log.float().exp()[:, None]  # [H, 1]
        bound = self.kd.gate_lower_bound
        if bound is None:
            g = -rate * F.softplus(f)  # [T, H, D]
        else:   # HF's Ling gate comes back in the model's dtype
            g = (bound * torch.sigmoid(rate * f)).to(x.dtype).float()  # [T, H, D]
        beta = torch.sigmoid(b.float())  # [T, H]
        o = self.states.scan(self.index, chunked, recurrent_step, q, k, v.float().view(T, H, D), g, beta)  # [T, H, D]
        gate = gate.float().view(T, H, D)  # [T, H, D]
        o = F.rms_norm(o, (D,), eps=self.eps) * self.o_norm.float() * torch.sigmoid(gate)  # [T, H, D]
        return linear(o.to(x.dtype).reshape(T, V), self.o_proj)  # [T, hidden]


class KimiLayer(HybridLayer):
    norm = staticmethod(rms_norm)


class KimiLinearForCausalLM(RecurrentHybridForCausalLM):
    """RecurrentHybridForCausalLM's contract with KDA and latent attention (Kimi's position-free)."""

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
        if len(self.config.nope_layers) < len(self.layers):   # Ling 3
            return super().layer_rotaries(positions)
        return [NoRotary()] * len(self.layers)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer = f"model.layers.{i}.", layer.mixer
            t.update(self._norm_targets(p, layer))
            t.update(_delta_targets(p + "self_attn.", mixer) if isinstance(mixer, KimiDeltaAttention)
                     else self._weight_targets_of_mla(p + "self_attn.", mixer))
            t.update(layer.mlp.checkpoint_targets(p + "mlp.") if isinstance(layer.mlp, SparseMoeBlock)
                     else self._mlp_targets(i, layer.mlp))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        c = self.config
        super().load_weights(pair for name, tensor in named_tensors for pair in _our_names(name, tensor, c))

    def _weight_targets_of_mla(self, p: str, attn: KimiLatentAttention) -> dict:
        t = mla_targets(p, attn)
        if attn.g_proj is not None:
            t[p + "g_proj.weight"] = (attn.g_proj, False)
        return t


def _delta_targets(p: str, net: KimiDeltaAttention) -> dict:
    kd, w, conv, R = net.kd, net.in_proj, net.conv_weight, net.rank
    H, V = kd.num_heads, kd.num_heads * kd.head_dim
    f, g = ("f_a_proj", "g_a_proj") if kd.low_rank_gates else ("f_proj", "g_proj")
    rows = {"q_proj": (0, V), "k_proj": (V, 2 * V), "v_proj": (2 * V, 3 * V), "b_proj": (3 * V, 3 * V + H),
            f: (3 * V + H, 3 * V + H + R), g: (3 * V + H + R, 3 * V + H + 2 * R)}
    t = {p + f"{name}.weight": (w[lo:hi], False) for name, (lo, hi) in rows.items()}
    t.update({p + f"{x}_conv1d.weight": (ConvWeight(conv[n * V:(n + 1) * V]), False) for n, x in enumerate("qkv")})
    t.update({p + "dt_bias": (net.dt_bias, False), p + "o_norm.weight": (net.o_norm, False),
              p + "A_log": (net.A_log.view(1, 1, H, 1) if kd.low_rank_gates else net.A_log, False),
              p + "o_proj.weight": (net.o_proj, False)})
    if kd.low_rank_gates:
        t.update({p + "f_b_proj.weight": (net.f_b_proj, False), p + "g_b_proj.weight": (net.g_b_proj, False)})
    return t


_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.w([123])\.weight$")
_EXPERT_NAMES = {"1": "gate_proj", "2": "down_proj", "3": "up_proj"}


_RENAMES = ((".block_sparse_moe.", ".mlp."), (".self_attn.forget_gate.", ".self_attn."),   # Kimi's checkpoints
            ("model.word_embeddings.", "model.embed_tokens."), (".attention.", ".self_attn."),   # Ling's
            (".self_attn.dense.", ".self_attn.o_proj."), (".mlp.gate.expert_bias", ".mlp.gate.e_score_correction_bias"))


def _our_names(name: str, tensor: torch.Tensor, config: ModelConfig):
    """One checkpoint tensor under the names _weight_targets gives: _RENAMES, experts' w1/w3/w2 as gate/up/down_proj,
    HF's concatenated conv1d split into q/k/v; the latent attention layers' (and the experts') through
    mla_checkpoint_tensors (layers past num_hidden_layers skipped, interleaved rope rows reordered, stacks split)."""
    kd = config.kimi_delta
    for old, new in _RENAMES:
        name = name.replace(old, new)
    name = _EXPERT.sub(lambda m: f".experts.{m.group(1)}.{_EXPERT_NAMES[m.group(2)]}.weight", name)
    layer = _LAYER.match(name)
    if layer is None or int(layer.group(1)) not in kd.linear_layers or ".self_attn." not in name:
        yield from mla_checkpoint_tensors([(name, tensor)], config)
    elif name.endswith(".self_attn.conv1d.weight"):
        for x, part in zip("qkv", tensor.split(kd.num_heads * kd.head_dim)):
            yield name.replace("conv1d", f"{x}_conv1d"), part
    else:
        yield name, tensor
