"""The base of the Mamba-2 hybrids whose layers are their own (Nemotron-H: nemotron_h.py, Falcon-H1: falcon_h1.py):
hybrid_model.RecurrentStateForCausalLM with the Mamba-2 mixers' states.  Granite 4.0 (granite_hybrid.py) and Bamba
(bamba.py) are hybrid_model.RecurrentHybridForCausalLM's, a mixer then an MLP or experts in each layer."""


import torch

from radixlm.runtime.models.config import ModelConfig

from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import rms_norm
from .mamba2 import mamba2_states
from .recurrent_state import RecurrentStates


class Mamba2HybridForCausalLM(RecurrentStateForCausalLM):
    """RecurrentStateForCausalLM's contract with Mamba-2 mixers' states."""

    LAYER_KIND = "hybrid (Mamba-2)"
    TP_REASON = " (its Mamba-2 mixers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        return mamba2_states(config.mamba2, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]
