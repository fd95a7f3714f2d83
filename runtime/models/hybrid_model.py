"""The base of the models whose recurrent layers keep a state per request row (recurrent_state.py) beside attention
layers with KV: Qwen3-Next and Qwen3.5 (qwen3_next.py), Granite 4.0 (granite_hybrid.py).  Each layer's `mixer` is a
recurrent layer or an attention layer numbered among the attention layers (its KV pool layer: kv_layer), its `mlp` the
dense MLP or a SparseMoeBlock.  `recurrent_state` tells the scheduler (hybrid_rules.py) never to share or take back a
request's tokens.  No tensor parallelism, no native one-call decode, no CUDA graphs, no FP8, no --deterministic.
"""

from typing import Optional

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layers import soft_cap
from .llama import LlamaMLP
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .own_layers import OwnLayersForCausalLM
from .recurrent_state import RecurrentStates


class RecurrentStateForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with `states` begun every forward pass; subclasses give make_states and
    make_layer (Nemotron-H and Falcon-H1 on this directly: mamba2_hybrid.py)."""

    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False
    recurrent_state = True

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        self.states = self.make_states(config, dtype, device)
        super().__init__(config, attn_backend, dtype, device, max_context)

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        raise NotImplementedError

    def kv_layer(self, layer_id: int) -> int:
        """An attention layer's place among the attention layers: its layer in the KV pool."""
        return layer_id - sum(1 for i in self.config.recurrent_layers if i < layer_id)

    def declare_attention_windows(self) -> None:
        """config.layer_windows (per model layer) declared to the attention backend in the attention layers' own
        numbering, the one their KV pool layers have (lara_mini.py, minimax_text.py)."""
        c = self.config
        attention = [i for i in range(c.num_layers) if i not in c.recurrent_layers]
        self.attn_backend.set_layer_variants([c.layer_windows[i] if c.layer_windows else None for i in attention])

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        return super().forward(fb)

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LlamaForCausalLM's, soft-capped where final_softcap is set (RecurrentGemma, xLSTM)."""
        return soft_cap(super().compute_logits(hidden), self.config.final_softcap)  # [N, V]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")


class RecurrentHybridForCausalLM(ExpertLayers, RecurrentStateForCausalLM):
    """Layers of a `mixer` (recurrent or attention) and an `mlp` (the dense MLP or a SparseMoeBlock)."""

    enable_native_decode = OwnLayersForCausalLM.enable_native_decode

    def make_mlp(self, layer_id: int, dtype, device) -> nn.Module:
        c = self.config
        if c.moe is not None and layer_id in c.moe.sparse_layers:
            return SparseMoeBlock(c.hidden_size, c.moe, dtype, device)
        return LlamaMLP(c, dtype, device)

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            mixer, mlp = layer.mixer, layer.mlp
            swaps += [(mixer, name) for name in getattr(mixer, "LINEARS", ("qkv_proj", "o_proj"))]
            if not isinstance(mlp, SparseMoeBlock):
                swaps += [(mlp, "gate_up_proj"), (mlp, "down_proj")]
            elif mlp.shared_gate_up is not None:
                swaps += [(mlp, "shared_gate_up"), (mlp, "shared_down")]
        return swaps
