"""Gemma 3n's decoder layer in plain torch (HF modeling_gemma3n.py Gemma3nTextDecoderLayer) over K parallel residual
streams [K, T, H] (AltUp), the attention Gemma 4's (gemma4_layers.Gemma4Attention: q/k norms, v norm without weight,
scores unscaled, the KV-reusing layers computing only queries).

AltUp: a router (tanh of modality_router over the RMSNormed stream times 1/H) gives per token K numbers; predict mixes
the streams by the K x K coefficients prediction_coefs makes of the active stream's (plus each stream itself), the
layer runs on the active prediction, correct adds to each prediction its innovation (the layer's output minus the
active prediction) times 1 + correction_coefs of the output's.  LAuReL: the normed input plus the RMSNormed
linear_right(linear_left(.)) of it, averaged with the attention's residual (sum / sqrt 2).  The MLP's gate keeps only
what is above mean + std * Phi^-1(sparsity) of its row (relu of the difference) on the sparse layers.  The per-layer
input: the active stream's correction (times correct_output_scale), gated and projected as Gemma 4's, RMSNormed, added
to streams 1..K-1.
Notation: K streams, T tokens, H hidden, P per-layer input width, r LAuReL rank.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gemma2 import GemmaMLP
from .gemma4_layers import NORMS, Gemma4Attention, mlp_targets, rms_norm, with_width
from .layer_ops import Rotary
from .layers import gelu_tanh_mul, param
from .packed_linear import linear


class Gemma3nMLP(GemmaMLP):
    """Gemma's gelu-tanh gated MLP; with sparsity > 0 its gate sparsified first (HF Gemma3nTextMLP._gaussian_topk)."""

    def __init__(self, c: ModelConfig, sparsity: float, dtype, device):
        super().__init__(c, dtype, device)
        # HF's Normal(0, 1).icdf(sparsity) in float32
        p = torch.tensor(sparsity, dtype=torch.float32)
        self.std_multiplier = (torch.erfinv(2 * p - 1) * math.sqrt(2)).item() if sparsity > 0.0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate_up = linear(x, self.gate_up_proj, None, self.gemm_rows)  # [T, 2I]
        if self.std_multiplier is not None:
            gate, up = gate_up.chunk(2, dim=-1)  # [T, I] each
            gate_up = torch.cat((self.sparsified(gate), up), dim=-1)  # [T, 2I]
        return linear(gelu_tanh_mul(gate_up), self.down_proj, None, self.gemm_rows)  # [T, I] -> [T, H]

    def sparsified(self, gate: torch.Tensor) -> torch.Tensor:
        """[T, I] -> [T, I]: relu(gate - (its row's mean + std * multiplier))."""
        multiplier = torch.tensor(self.std_multiplier, dtype=torch.float32).to(gate.dtype)
        cutoff = gate.mean(dim=-1, keepdim=True) + gate.std(dim=-1, keepdim=True, unbiased=False) * multiplier
        return F.relu(gate - cutoff)


class Gemma3nDecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        g, n, hidden = c.gemma3n, c.gemma3n.altup_inputs, c.hidden_size
        self.eps, self.active, self.correct_scale = c.rms_norm_eps, g.altup_active, g.altup_correct_scale
        for name in NORMS + ("router_norm", "post_laurel_norm"):
            setattr(self, name, param(hidden, dtype=dtype, device=device))  # [H]
        self.self_attn = Gemma4Attention(c, layer_id, attn_backend, dtype, device)
        self.mlp = Gemma3nMLP(with_width(c, g.intermediate[layer_id]), g.sparsity[layer_id], dtype, device)
        self.correct_output_scale = param(hidden, dtype=dtype, device=device)  # [H]
        self.correction_coefs = param(n, n, dtype=dtype, device=device)  # [K, K]
        self.prediction_coefs = param(n * n, n, dtype=dtype, device=device)  # [K*K, K]
        self.modality_router = param(n, hidden, dtype=dtype, device=device)  # [K, H]
        self.router_scale = torch.tensor(hidden ** -1.0).to(dtype).item()
        self.laurel_left = param(g.laurel_rank, hidden, dtype=dtype, device=device)  # [r, H]
        self.laurel_right = param(hidden, g.laurel_rank, dtype=dtype, device=device)  # [H, r]
        p = c.gemma4.per_layer_input
        self.per_layer_input_gate = param(p, hidden, dtype=dtype, device=device) if p else None  # [P, H]
        self.per_layer_projection = param(hidden, p, dtype=dtype, device=device) if p else None  # [H, P]
        self.post_per_layer_input_norm = param(hidden, dtype=dtype, device=device) if p else None  # [H]
        self.gemm_rows: Optional[int] = None

    def forward(self, streams: torch.Tensor, per_layer_input: Optional[torch.Tensor], rotary: Rotary,
                fb: ForwardBatch) -> torch.Tensor:
        """streams: [K, T, H], per_layer_input: [T, P] or None -> [K, T, H]."""
        predictions = self.predict(streams)  # [K, T, H]
        active = predictions[self.active]  # [T, H]
        normed = rms_norm(active, self.input_layernorm, self.eps)  # [T, H]
        laurel = normed + self.laurel(normed)  # [T, H]
        attn = rms_norm(self.self_attn(normed, rotary, fb), self.post_attention_layernorm, self.eps)  # [T, H]
        x = (active + attn + laurel) / math.sqrt(2)  # [T, H]
        h = self.mlp(rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        corrected = self.correct(predictions, x + rms_norm(h, self.post_feedforward_layernorm, self.eps))  # [K, T, H]
        if self.per_layer_input_gate is None:
            return corrected
        first = corrected[self.active]  # [T, H]
        if self.correct_scale:
            first = first * self.correct_output_scale
        gate = F.gelu(linear(first, self.per_layer_input_gate, None, self.gemm_rows), approximate="tanh")  # [T, P]
        h = linear(gate * per_layer_input, self.per_layer_projection, None, self.gemm_rows)  # [T, H]
        return torch.cat((corrected[:1], corrected[1:] + rms_norm(h, self.post_per_layer_input_norm, self.eps)))

    def laurel(self, x: torch.Tensor) -> torch.Tensor:
        """LAuReL's low-rank term: [T, H] -> [T, H]."""
        low = linear(linear(x, self.laurel_left, None, self.gemm_rows), self.laurel_right, None, self.gemm_rows)
        return rms_norm(low, self.post_laurel_norm, self.eps)

    def route(self, x: torch.Tensor) -> torch.Tensor:
        """AltUp's router: [T, H] -> [T, K] in (-1, 1)."""
        routed = linear(rms_norm(x, self.router_norm, self.eps) * self.router_scale, self.modality_router, None,
                        self.gemm_rows)  # [T, K]
        return torch.tanh(routed.float()).to(x.dtype)

    def predict(self, streams: torch.Tensor) -> torch.Tensor:
        """[K, T, H] -> [K, T, H]: stream c + sum over s of coefficient (c, s) times stream s."""
        K, T = streams.shape[:2]
        coefs = linear(self.route(streams[self.active]), self.prediction_coefs, None, self.gemm_rows)  # [T, K*K]
        coefs = coefs.view(T, K, K)  # [T, c, s]
        return torch.einsum("tcs,sth->cth", coefs, streams) + streams

    def correct(self, predictions: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """predictions [K, T, H], the layer's output [T, H] -> [K, T, H]: each prediction plus the innovation times
        its coefficient."""
        coefs = linear(self.route(output), self.correction_coefs, None, self.gemm_rows) + 1.0  # [T, K]
        innovation = output - predictions[self.active]  # [T, H]
        return innovation * coefs.t().unsqueeze(-1) + predictions

    def checkpoint_targets(self, prefix: str) -> dict:
        """HF name -> destination of this layer's weights under `prefix` ("model.layers.{i}.")."""
        t = {prefix + name + ".weight": getattr(self, name) for name in NORMS}
        a, lr = prefix + "altup.", prefix + "laurel."
        t.update({a + "correct_output_scale": self.correct_output_scale, a + "router_norm.weight": self.router_norm,
                  a + "correction_coefs.weight": self.correction_coefs, a + "modality_router.weight": self.modality_router,
                  a + "prediction_coefs.weight": self.prediction_coefs, lr + "linear_left.weight": self.laurel_left,
                  lr + "linear_right.weight": self.laurel_right, lr + "post_laurel_norm.weight": self.post_laurel_norm,
                  **self.self_attn.checkpoint_targets(prefix + "self_attn."), **mlp_targets(self.mlp, prefix + "mlp.")})
        if self.per_layer_input_gate is not None:
            t.update({prefix + "per_layer_input_gate.weight": self.per_layer_input_gate,
                      prefix + "per_layer_projection.weight": self.per_layer_projection,
                      prefix + "post_per_layer_input_norm.weight": self.post_per_layer_input_norm})
        return t
