"""xLSTM (HF xLSTMForCausalLM with its native kernels; fields: xlstm_config.py): no attention, no KV.  Each layer is
x + mlstm(rmsnorm(x)), then x + ffn(rmsnorm(x)) (RMSNorms with a bias where use_bias); the FFN is SwiGLU.
The mLSTM: q, k [T, Hn, Dk], v and the output gate o [T, Hn, Dv], and per head an input gate i and a forget gate f
(soft-capped); each head's memory (C [Dk, Dv], n [Dk], m) advances token by token, HF's recurrent step:
    m' = max(logsigmoid(f) + m, i);  C' = e^{logsigmoid(f) + m - m'} C + e^{i - m'} k v^T;  n' likewise with k;
    h = (q' C') / (max(|q' . n'|, e^{-m'}) + eps),  q' = q / sqrt(Dk);
then each head's h LayerNormed (no affine) and, weighted, times sigmoid(o), through out_proj.  The memories are each
request row's state (recurrent_state.py: [Hn, Dk Dv + Dk + 1] per layer, float32).  Logits soft-capped.
Checkpoint names: backbone.{embeddings, blocks.{i}.{norm_mlstm, mlstm_layer.*, norm_ffn, ffn.*}, out_norm}, lm_head.
No tensor parallelism, no native one-call decode, no FP8.  Notation: T tokens, H hidden, F the FFN's width.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param, soft_cap
from .packed_linear import linear
from .recurrent_state import RecurrentStates

_OUTER_NAMES = {"backbone.embeddings.weight": "model.embed_tokens.weight",
                "backbone.out_norm.weight": "model.norm.weight"}


class XlstmLayer(nn.Module):
    LINEARS = ("qkvo", "if_gate", "out_proj", "gate_up", "down")

    def __init__(self, c: ModelConfig, index: int, states: RecurrentStates, dtype, device):
        super().__init__()
        x, H, F_ = c.xlstm, c.hidden_size, c.intermediate_size
        self.c, self.x, self.index, self.states = c, x, index, states

        def bias(n):
            return param(n, dtype=dtype, device=device) if x.use_bias else None

        self.norm_mlstm, self.norm_ffn = (param(H, dtype=dtype, device=device) for _ in "mf")  # [H] each
        self.norm_mlstm_bias, self.norm_ffn_bias = bias(H), bias(H)
        self.qkvo = param(2 * x.qk_dim + 2 * x.v_dim, H, dtype=dtype, device=device)  # [2Dk Hn + 2Dv Hn, H]
        self.qkvo_bias = bias(2 * x.qk_dim + 2 * x.v_dim)
        self.if_gate = param(2 * x.heads, H, dtype=dtype, device=device)  # [2Hn, H]: input, forget
        self.if_bias = param(2 * x.heads, dtype=dtype, device=device)  # [2Hn]
        self.head_norm, self.head_norm_bias = param(x.v_dim, dtype=dtype, device=device), bias(x.v_dim)
        self.out_proj, self.out_bias = param(H, x.v_dim, dtype=dtype, device=device), bias(H)
        self.gate_up, self.gate_up_bias = param(2 * F_, H, dtype=dtype, device=device), bias(2 * F_)  # [2F, H]
        self.down, self.down_bias = param(H, F_, dtype=dtype, device=device), bias(H)  # [H, F]

    def forward(self, x: torch.Tensor, rotary: Optional[Rotary], fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]; advances each request's memories by its new tokens."""
        x = x + self._mlstm(self._norm(x, self.norm_mlstm, self.norm_mlstm_bias))  # [T, H]
        h = linear(self._norm(x, self.norm_ffn, self.norm_ffn_bias), self.gate_up, self.gate_up_bias)  # [T, 2F]
        gate, up = h.chunk(2, dim=1)
        return x + linear(F.silu(gate) * up, self.down, self.down_bias)  # [T, H]

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        x = rms_norm(x, weight, self.c.rms_norm_eps)
        return x if bias is None else x + bias

    def _mlstm(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        T, m = x.shape[0], self.x
        q, k, v, o = linear(x, self.qkvo, self.qkvo_bias).split([m.qk_dim, m.qk_dim, m.v_dim, m.v_dim], dim=1)
        gates = soft_cap(linear(x, self.if_gate, self.if_bias), m.gate_soft_cap)  # [T, 2Hn]
        q, k, v = (t.reshape(T, m.heads, -1) for t in (q, k, v))  # [T, Hn, Dk] x2, [T, Hn, Dv]
        step = self._step

        def per_request(q, k, v, i, f, state):
            return torch.cat([step(q[t:t + 1], k[t:t + 1], v[t:t + 1], i[t:t + 1], f[t:t + 1], state[None])
                              for t in range(q.shape[0])])

        h = self.states.scan(self.index, per_request, step, q, k, v, *gates.chunk(2, dim=1))  # [T, Hn, Dv]
        h = F.layer_norm(h.float(), (h.shape[-1],), eps=self.c.rms_norm_eps).to(x.dtype).reshape(T, -1)  # [T, Dv Hn]
        h = h * self.head_norm if self.head_norm_bias is None else h * self.head_norm + self.head_norm_bias
        return linear(torch.sigmoid(o) * h, self.out_proj, self.out_bias)  # [T, H]

    def _step(self, q, k, v, i, f, states: torch.Tensor) -> torch.Tensor:
        """One token of each of R requests: q, k [R, Hn, Dk], v [R, Hn, Dv], i, f [R, Hn]; states [R, Hn, S] updated
        in place (a copy the caller writes back, or a request's row).  -> h [R, Hn, Dv] in q's dtype."""
        Dk, Dv = q.shape[2], v.shape[2]
        C = states[..., :Dk * Dv].unflatten(-1, (Dk, Dv))  # [R, Hn, Dk, Dv]
        n, m = states[..., Dk * Dv:-1], states[..., -1]  # [R, Hn, Dk], [R, Hn]
        log_f = F.logsigmoid(f.float())  # [R, Hn]
        m_new = torch.maximum(log_f + m, i.float())  # [R, Hn]
        f_act, i_act = torch.exp(log_f + m - m_new)[..., None], torch.exp(i.float() - m_new)[..., None]
        C = f_act[..., None] * C + i_act[..., None] * (k.float()[..., :, None] * v.float()[..., None, :])
        n = f_act * n + i_act * k.float()  # [R, Hn, Dk]
        qs = q.float() * Dk ** -0.5  # [R, Hn, Dk]
        num = torch.einsum("rhk,rhkv->rhv", qs, C)  # [R, Hn, Dv]
        qn = (qs * n).sum(-1, keepdim=True)  # [R, Hn, 1]
        h = num / (torch.maximum(qn.abs(), torch.exp(-m_new)[..., None]) + self.x.eps)  # [R, Hn, Dv]
        states.copy_(torch.cat([C.flatten(-2), n, m_new[..., None]], dim=-1))
        return h.to(q.dtype)

    def targets(self, p: str) -> dict:
        """HF name -> (destination, broadcast allowed) under `p` ("backbone.blocks.0.")."""
        m, t = self.x, {}
        a, f = p + "mlstm_layer.", p + "ffn."
        ends = (m.qk_dim, 2 * m.qk_dim, 2 * m.qk_dim + m.v_dim)
        F_ = self.down.shape[1]
        parts = [(a + name, _rows(self.qkvo, lo, hi), _rows(self.qkvo_bias, lo, hi))
                 for name, lo, hi in zip(("q", "k", "v", "ogate_preact"), (0,) + ends, ends + (None,))]
        parts += [(a + "igate_preact", self.if_gate[:m.heads], self.if_bias[:m.heads]),
                  (a + "fgate_preact", self.if_gate[m.heads:], self.if_bias[m.heads:]),
                  (f + "proj_up_gate", self.gate_up[:F_], _rows(self.gate_up_bias, 0, F_)),
                  (f + "proj_up", self.gate_up[F_:], _rows(self.gate_up_bias, F_, None))]
        parts += [(a + "multihead_norm", self.head_norm, self.head_norm_bias),
                  (a + "out_proj", self.out_proj, self.out_bias), (f + "proj_down", self.down, self.down_bias),
                  (p + "norm_mlstm", self.norm_mlstm, self.norm_mlstm_bias),
                  (p + "norm_ffn", self.norm_ffn, self.norm_ffn_bias)]
        for name, weight, bias in parts:
            t[name + ".weight"] = (weight, False)
            if bias is not None:
                t[name + ".bias"] = (bias, False)
        return t


def _rows(t: Optional[torch.Tensor], lo: int, hi: Optional[int]) -> Optional[torch.Tensor]:
    return None if t is None else t[lo:hi]


class xLSTMForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "recurrent (mLSTM)"
    TP_REASON = " (its mLSTM memories run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        x = config.xlstm
        Dk, Dv = x.qk_dim // x.heads, x.v_dim // x.heads
        return RecurrentStates(config.num_layers, 0, 2, (x.heads, Dk * Dv + Dk + 1), dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return XlstmLayer(self.config, layer_id, self.states, dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        return [None] * len(self.layers)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _linear_weights(self) -> list:
        return [(self, "lm_head")] + [(layer, name) for layer in self.layers for name in XlstmLayer.LINEARS]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            t.update(layer.targets(f"backbone.blocks.{i}."))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_OUTER_NAMES.get(name, name), tensor) for name, tensor in named_tensors)
