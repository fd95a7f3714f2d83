"""The base of the Mamba-2 hybrids whose layers are their own (Nemotron-H: nemotron_h.py, Falcon-H1: falcon_h1.py):
OwnLayersForCausalLM with each request row's recurrent state (recurrent_state.py) begun every forward pass.
Granite 4.0 (granite_hybrid.py) does the same beside its experts."""

from typing import Optional

import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import rms_norm
from .own_layers import OwnLayersForCausalLM
from .recurrent_state import RecurrentStates


class Mamba2HybridForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract; `states` holds each request row's recurrent state (`recurrent_state`)."""

    LAYER_KIND = "hybrid (Mamba-2)"
    TP_REASON = " (its Mamba-2 mixers run on one rank)"
    loads_fp8_checkpoints = False
    quantizes_to_fp8 = False
    recurrent_state = True

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        m = config.mamba2
        self.states = RecurrentStates(len(m.mamba_layers), m.conv_dim, m.conv_kernel,
                                      (m.num_heads, m.head_dim, m.d_state), dtype, device)
        super().__init__(config, attn_backend, dtype, device, max_context)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.states.begin(fb)
        return super().forward(fb)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"--deterministic does not support {self.config.architecture} yet")
