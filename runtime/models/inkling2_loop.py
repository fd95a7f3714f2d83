"""Thinking Machines' Inkling 2 Loop (HF Inkling2LoopForCausalLM, its text model): Inkling 2 (inkling2.py) whose layers
start..end-1 run loop_num_passes times.  Every pass after the first restarts from the stream and blocks before the
loop, on its own KV layers and convolution states (ModelConfig.num_layers counts them: the checkpoint's layers, then
each later pass's loop layers), and gates each loop layer's q, k, v and MLP inputs with messages: learned-query
attention over the previous pass's blocks (its first left out) and last stream, mixed in as (1 - forget) * x +
gain * message, both tanh of a rank loop_gate_rank projection of the RMSNormed input and message.
Notation: T tokens, H hidden, L loop layers, r the gate rank.
"""

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .inkling2 import Inkling2ForCausalLM, block_attention
from .inkling2_attention import unit_rms
from .inkling_attention import requests_of
from .layer_ops import rms_norm
from .layers import param
from .packed_linear import linear
from .quant_linear import embed

_GATES = ("attn", "k", "v", "mlp")   # the checkpoints' controllers of the q, k, v and MLP inputs


class MessageGates(nn.Module):
    """HF Inkling2LoopMessageGate, for the q, k, v and MLP inputs of one loop layer."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        h, rank = c.hidden_size, c.inkling.loop[3]
        self.eps = c.rms_norm_eps
        self.down = param(4, rank, 2 * h, dtype=dtype, device=device)  # [4, r, 2H]
        self.forget = param(4, h, rank, dtype=torch.float32, device=device)  # [4, H, r]
        self.gain = param(4, h, rank, dtype=torch.float32, device=device)  # [4, H, r]

    def forward(self, i: int, x: torch.Tensor, message: torch.Tensor) -> torch.Tensor:
        """Input i's x [T, H] with its message [T, H] -> [T, H] float32."""
        x, message = x.float(), message.float()
        z = torch.cat([unit_rms(x, self.eps), unit_rms(message, self.eps)], dim=-1)  # [T, 2H]
        z = linear(z.to(self.down.dtype), self.down[i]).float()  # [T, r]
        return (1 - torch.tanh(F.linear(z, self.forget[i]))) * x + torch.tanh(F.linear(z, self.gain[i])) * message

    def checkpoint_targets(self, p: str) -> dict:
        t = {}
        for i, name in enumerate(_GATES):
            t.update({p + f"controllers.{name}.down_weight": (self.down[i], False),
                      p + f"controllers.{name}.forget_weight": (self.forget[i], False),
                      p + f"controllers.{name}.gain_weight": (self.gain[i], False)})
        return t


class EveryOther:
    """The load destination of the checkpoints' message queries [2L, H]: even rows to `first`, odd ones to `second`
    ([L, H] each)."""

    def __init__(self, first: torch.Tensor, second: torch.Tensor):
        self.first, self.second = first, second
        self.shape = torch.Size((2 * first.shape[0], first.shape[1]))

    def copy_(self, tensor: torch.Tensor) -> None:
        self.first.copy_(tensor[0::2])
        self.second.copy_(tensor[1::2])


class Inkling2LoopForCausalLM(Inkling2ForCausalLM):
    """self.layers: the checkpoint's layers; config.num_layers: the KV layers."""

    LAYER_KIND = "Inkling 2 Loop"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        start, end, _, _ = config.inkling.loop
        layers = config.num_layers - config.inkling.kv_layers(0)   # the checkpoint's
        super().__init__(dataclasses.replace(config, num_layers=layers), attn_backend, dtype, device, max_context)
        self.config = config
        for layer in self.layers[start:end]:
            layer.message_gates = MessageGates(config, dtype, device)
        self.message_queries = param(end - start, 4, config.hidden_size, dtype=torch.float32, device=device)  # [L,4,H]

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        reqs, eps = requests_of(fb), self.config.rms_norm_eps
        start, end, passes, _ = self.config.inkling.loop
        x = rms_norm(embed(fb.input_ids, self.embed_tokens, self.dtype), self.embed_norm, eps)  # [T, H]
        x, blocks = self._run(range(start), x, [], reqs, fb)
        before = x, blocks
        x, blocks = self._run(range(start, end), x, blocks, reqs, fb)
        for p in range(1, passes):
            previous, last = blocks[len(before[1]) + 1:], x   # the first block of a pass is the stream before it
            first_slot = len(self.layers) + (p - 1) * (end - start) - start
            x, blocks = self._run(range(start, end), *before, reqs, fb, first_slot, (previous, last))
        x, blocks = self._run(range(end, len(self.layers)), x, blocks, reqs, fb)
        return rms_norm(block_attention(self.final_query, blocks, x)[0], self.norm, eps).to(self.dtype)  # [T, H]

    def _run(self, layer_ids, x: torch.Tensor, blocks: list, reqs: list, fb: ForwardBatch, offset: int = 0,
             previous: Optional[tuple] = None):
        """Layers layer_ids on KV layers offset + id, with messages from `previous` (its blocks and last stream)
        where given -> (x, blocks)."""
        for i in layer_ids:
            layer = self.layers[i]
            messages = None
            if previous is not None:   # a loop layer's own 4 queries [4, H]
                messages = block_attention(self.message_queries[i - self.config.inkling.loop[0]], *previous)
            out = layer(x, blocks, reqs, fb, offset + i, messages)  # [T, H]
            if layer.boundary:
                blocks = blocks + [x]
            x = out
        return x, blocks

    def _weight_targets(self) -> dict:
        start, end, _, _ = self.config.inkling.loop
        t = super()._weight_targets()
        q = self.message_queries
        t.update({"model.llm.middle_cycle_cross_pass_queries": (EveryOther(q[:, 0], q[:, 3]), False),
                  "model.llm.middle_cycle_cross_pass_kv_queries": (EveryOther(q[:, 1], q[:, 2]), False)})
        for i in range(start, end):
            t.update(self.layers[i].message_gates.checkpoint_targets(f"model.llm.layers.{i}."))
        return t
