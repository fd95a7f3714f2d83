"""Hy V4 (HF HYV4ForCausalLM; fields: hy_v4_config.py): DeepSeek-V3.2's pre-norm layers (deepseek.py; the
indexers' weights dropped as dsa.py drops them) around N residual streams per token (hyper-connections), MLA with a
sigmoid gate per head dim and a sink logit per head (the kernels' sinks variant), experts with a clamped SwiGLU.

Streams X [T, N, H]: the embedding copied N times.  Before each sublayer, from r = rsqrt(mean(X^2) + eps) over all
N*H values and m = (fn X) r: the sublayer reads sum_n pre_n X_n with pre = sigmoid(m[:N] * scale0 + base[:N]) + e, and
its output h joins as X_n += post_n h with post = magnitude * sigmoid(m[N:] * scale1 + base[N:]) + e; all in float32.
The final norm reads sum_n pre_n X_n of the head's own mix.  Checkpoint names are the released ones (HF's
conversion_mapping "hy_v4"): hc_pre.hc_{attn,mlp}_layer.hc_{fn,base,scale}, hc_pre.hc_head.hc_head_{fn,base,scale},
self_attn.linear_gate (the gate), learnable_sink_param; every other .linear_gate is a gate_proj.  One rank.
Notation as in mla.py; N streams.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .layer_ops import Rotary, rms_norm, silu_mul
from .layers import param
from .mla import MLAAttention
from .moe import SparseMoeBlock, _use_triton, grouped_experts
from .moe_router import route
from .packed_linear import linear
from .quant_linear import embed

_RENAMES = ((".hc_pre.hc_attn_layer.hc_", ".attn_hc."), (".hc_pre.hc_mlp_layer.hc_", ".ffn_hc."),
            ("model.hc_pre.hc_head.hc_head_", "model.hc_head."), ("model.hc_head.hc_pre.hc_head_", "model.hc_head."),
            (".learnable_sink_param", ".sinks"),
            (".linear_gate.", ".gate_proj."))


class GatedSinkMLA(MLAAttention):
    """MLA whose output is gated by sigmoid(gate_proj(x)) per head dim; its sinks [Hq] go to the kernels."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.latent_eps = c.hyper_streams.latent_eps
        self.gate_proj = param(c.num_heads * c.mla.v_head_dim, c.hidden_size, dtype=dtype, device=device)
        self.sinks = param(c.num_heads, dtype=torch.float32, device=device)  # [Hq]
        self._x = None

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        self._x = x   # the gate's input, read by queries()
        return super().forward(x, rotary, fb)

    def queries(self, q_a: torch.Tensor):
        return super().queries(q_a)[0], linear(self._x, self.gate_proj)  # [T, Hq, N+R], [T, Hq*Vd]


class ClampedExperts(SparseMoeBlock):
    """SparseMoeBlock whose experts run silu(min(gate, limit)) * clamp(up, -limit, limit) (the fused Triton kernel's
    act on CUDA, as gpt-oss's)."""

    def __init__(self, hidden_size: int, moe, limit: float, dtype, device):
        super().__init__(hidden_size, moe, dtype, device)
        self.act = lambda gate_up: _clamped_swiglu(gate_up, limit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        weights, ids = route(F.linear(x.float(), self.gate), self.moe, self.correction_bias)  # [T, k] each
        if self.packed_experts is None and _use_triton(x):
            from radixlm.kernels.triton_moe import fused_moe

            out = fused_moe(x, self.w13, self.w2, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        else:
            experts = self.packed_experts or (self.w13, self.w2)
            out = grouped_experts(x, *experts, weights, ids, self.expert_offset, act=self.act)  # [T, H]
        return out + linear(silu_mul(linear(x, self.shared_gate_up)), self.shared_down)  # [T, H]


def _clamped_swiglu(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)


def stream_weights(streams: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    """streams [T, N, H] -> the mix logits (fn [M, N*H] times the flattened streams, over their RMS) [T, M]."""
    flat = streams.flatten(1).float()  # [T, N*H]
    return F.linear(flat, fn.float()) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + eps)


class StreamsLayer(DeepseekDecoderLayer):
    attention_class = GatedSinkMLA

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__(c, layer_id, attn_backend, mlp, dtype, device)
        n, s = c.hyper_streams.streams, c.hyper_streams
        self.hc, self.width = s, n * c.hidden_size
        for name in ("attn_hc", "ffn_hc"):
            setattr(self, name + "_fn", param(2 * n, self.width, dtype=torch.float32, device=device))  # [2N, N*H]
            setattr(self, name + "_base", param(2 * n, dtype=torch.float32, device=device))  # [2N]
            setattr(self, name + "_scale", param(2, dtype=torch.float32, device=device))  # [2]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, N, H] streams -> [T, N, H]."""
        x = self.sublayer(x, "attn_hc", lambda h: self.self_attn(rms_norm(h, self.input_layernorm, self.eps),
                                                                  rotary, fb))
        return self.sublayer(x, "ffn_hc", lambda h: self.mlp(rms_norm(h, self.post_attention_layernorm, self.eps)))

    def sublayer(self, x: torch.Tensor, name: str, run) -> torch.Tensor:
        n, s = x.shape[1], self.hc
        fn, base, scale = (getattr(self, name + part) for part in ("_fn", "_base", "_scale"))
        mix = stream_weights(x, fn, self.eps)  # [T, 2N]
        pre = torch.sigmoid(mix[:, :n] * scale[0] + base[:n]) + s.eps  # [T, N]
        post = s.magnitude * torch.sigmoid(mix[:, n:] * scale[1] + base[n:]) + s.eps  # [T, N]
        h = run((pre.unsqueeze(-1) * x).sum(dim=1).to(x.dtype))  # [T, H]
        return (post.unsqueeze(-1) * h.float().unsqueeze(1) + x.float()).to(x.dtype)  # [T, N, H]


class HYV4ForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM's contract with residual streams, gated MLA with sinks and clamped experts."""

    LAYER_KIND = "hyper-connection"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        n = config.hyper_streams.streams
        self.hc_fn = param(n, n * config.hidden_size, dtype=torch.float32, device=device)  # [N, N*H]
        self.hc_base = param(n, dtype=torch.float32, device=device)  # [N]
        self.hc_scale = param(1, dtype=torch.float32, device=device)  # [1]
        attn_backend.set_layer_variants([None] * config.num_layers,
                                        sinks=[layer.self_attn.sinks for layer in self.layers])

    def _make_mlp(self, layer_id: int, dtype, device) -> nn.Module:
        c = self.config
        if layer_id in c.moe.sparse_layers:
            return ClampedExperts(c.hidden_size, c.moe, c.hyper_streams.swiglu_limit, dtype, device)
        return super()._make_mlp(layer_id, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return StreamsLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device), dtype,
                            device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        x = embed(fb.input_ids, self.embed_tokens, self.dtype)  # [T, H]
        return x.unsqueeze(1).expand(-1, self.config.hyper_streams.streams, -1).contiguous()  # [T, N, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.sigmoid(stream_weights(x, self.hc_fn, self.config.rms_norm_eps) * self.hc_scale + self.hc_base)
        h = ((pre + self.config.hyper_streams.eps).unsqueeze(-1) * x).sum(dim=1).to(x.dtype)  # [T, H]
        return rms_norm(h, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        return super()._linear_weights() + [(layer.self_attn, "gate_proj") for layer in self.layers]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        t.update({"model.hc_head.fn": (self.hc_fn, False), "model.hc_head.base": (self.hc_base, False),
                  "model.hc_head.scale": (self.hc_scale, False)})
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update({p + "self_attn.gate_proj.weight": (layer.self_attn.gate_proj, False),
                      p + "self_attn.sinks": (layer.self_attn.sinks, False)})
            for name in ("attn_hc", "ffn_hc"):
                t.update({p + f"{name}.{part}": (getattr(layer, f"{name}_{part}"), False)
                          for part in ("fn", "base", "scale")})
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The released names as ours, without the indexers, then DeepseekForCausalLM's stream."""
        def renamed():
            for name, tensor in named_tensors:
                if ".self_attn.indexer." not in name:
                    for theirs, ours in _RENAMES:
                        name = name.replace(theirs, ours)
                    yield name, tensor
        return super().checkpoint_tensors(renamed())
