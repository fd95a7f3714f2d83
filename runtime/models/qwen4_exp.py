"""Qwen4-Exp (HF Qwen4ExpForCausalLM; fields: qwen4_exp_config.py): Qwen3.5-MoE's gated delta nets, gated attention
and experts (qwen3_next.py) over S = hc_count residual streams [T, S*H] joined by hyper-connections.

A hyper-connection of a sublayer: n = each stream RMS-normed by (1 + weight) (hc_norm, one weight per stream and
channel); the sublayer reads mean over streams of sigmoid(up(silu(down(n) / S))) * n, and its output y is added to
every stream s of the unnormed input times 2 sigmoid(inject(n)_s / S).  Each layer has one around its mixer and one
around its experts, and no other norm; the model's last hyper-connection (without injection) gives the final hidden
states.  Embeddings start every stream.  The attention layers' QSA indexer weights are not read (the context is capped
where it would keep every key).  No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8.
"""

from typing import Iterable, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import gemma_rms_norm, param
from .packed_linear import linear
from .qwen3_next import Qwen3NextForCausalLM


class HyperConnection(nn.Module):
    def __init__(self, c: ModelConfig, inject: bool, dtype, device):
        super().__init__()
        S, H = c.hyper.streams, c.hidden_size
        self.streams, self.hidden, self.eps = S, H, c.rms_norm_eps
        self.hc_norm = param(S * H, dtype=dtype, device=device)  # [S*H]
        self.input_mix_weight_down = param(c.hyper.rank, S * H, dtype=dtype, device=device)  # [r, S*H]
        self.input_mix_weight_up = param(S * H, c.hyper.rank, dtype=dtype, device=device)  # [S*H, r]
        self.block_inject_weight = param(S, S * H, dtype=dtype, device=device) if inject else None  # [S, S*H]

    def mix(self, x: torch.Tensor):
        """x: [T, S*H] -> (the sublayer's input [T, H], the streams' weights [T, S] or None, the normed streams)."""
        T, S, H = x.shape[0], self.streams, self.hidden
        n = gemma_rms_norm(x.view(T, S, H), self.hc_norm.view(S, H), self.eps).view(T, S * H)  # [T, S*H]
        w = F.silu(linear(n, self.input_mix_weight_down) / S)  # [T, r]
        w = torch.sigmoid(linear(w, self.input_mix_weight_up)).view(T, S, H)  # [T, S, H]
        mixed = (w * n.view(T, S, H)).mean(dim=1)  # [T, H]
        inject = None if self.block_inject_weight is None else 2 * torch.sigmoid(linear(n, self.block_inject_weight) / S)
        return mixed, inject

    def around(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        """x [T, S*H] + sublayer(mixed) added to each stream with its weight -> [T, S*H]."""
        mixed, inject = self.mix(x)
        y = sublayer(mixed)  # [T, H]
        return x + (inject[:, :, None] * y[:, None, :]).flatten(1)  # [T, S*H]


class Qwen4ExpLayer(nn.Module):
    def __init__(self, c: ModelConfig, mixer: nn.Module, mlp: nn.Module, dtype, device):
        super().__init__()
        self.mixer, self.mlp = mixer, mlp
        self.attn_hyper_connection = HyperConnection(c, True, dtype, device)
        self.mlp_hyper_connection = HyperConnection(c, True, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, S*H] streams -> [T, S*H]."""
        x = self.attn_hyper_connection.around(x, lambda h: self.mixer(h, rotary, fb))
        return self.mlp_hyper_connection.around(x, self.mlp)


class Qwen4ExpForCausalLM(Qwen3NextForCausalLM):
    """Qwen3NextForCausalLM's layers over hyper-connected residual streams."""

    layer_class = Qwen4ExpLayer

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.hyper_connection_mixer = HyperConnection(config, False, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        return super().embed_inputs(fb).repeat(1, self.config.hyper.streams)  # [T, S*H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.hyper_connection_mixer.mix(x)[0]  # [T, H]

    def _outer_targets(self) -> dict:
        t = super()._outer_targets()
        del t["model.norm.weight"]   # none: the last hyper-connection
        t.update(_hyper_targets("model.hyper_connection_mixer.", self.hyper_connection_mixer))
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        return {**_hyper_targets(prefix + "attn_hyper_connection.", layer.attn_hyper_connection),
                **_hyper_targets(prefix + "mlp_hyper_connection.", layer.mlp_hyper_connection)}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """Qwen3-Next's stream without the QSA indexers' weights (never run: qwen4_exp_config.py)."""
        return super().checkpoint_tensors((name, t) for name, t in named_tensors if ".self_attn.indexer." not in name)


def _hyper_targets(p: str, hc: HyperConnection) -> dict:
    t = {p + name + ".weight": (getattr(hc, name), False)
         for name in ("hc_norm", "input_mix_weight_down", "input_mix_weight_up")}
    if hc.block_inject_weight is not None:
        t[p + "block_inject_weight.weight"] = (hc.block_inject_weight, False)
    return t
