"""The attention-free stacks (fields: mamba_stack_config.py): Mamba-2 (HF Mamba2ForCausalLM, its mixers mamba2.py's),
Mamba and Falcon Mamba (MambaForCausalLM, FalconMambaForCausalLM: mamba1.py).  Each layer is x + mixer(norm(x)), the
residual stream in float32 where residual_in_fp32, normed in the model dtype.  No layer has KV: the pool has no
layers, and each request's whole memory is its row of the mixers' states.
Checkpoint names: backbone.{embeddings (or embedding), layers.{i}.{norm, mixer.*}, norm_f} and lm_head.
No tensor parallelism, no native one-call decode, no FP8.
"""

from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .granite_hybrid import mixer_targets
from .hybrid_model import RecurrentStateForCausalLM
from .layer_ops import Rotary, rms_norm
from .layers import param
from .mamba1 import MambaMixer, mamba1_states
from .mamba2 import Mamba2Mixer, mamba2_states
from .recurrent_state import RecurrentStates

_OUTER_NAMES = {"model.embeddings.weight": "model.embed_tokens.weight",
                "model.embedding.weight": "model.embed_tokens.weight", "model.norm_f.weight": "model.norm.weight"}


class MambaStackBlock(nn.Module):
    """x + mixer(norm(x)): x in float32 or the model dtype, the norm's input in the model dtype."""

    def __init__(self, c: ModelConfig, mixer: nn.Module, dtype, device):
        super().__init__()
        self.eps, self.mixer, self.dtype = c.rms_norm_eps, mixer, dtype
        self.norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        return x + self.mixer(rms_norm(x.to(self.dtype), self.norm, self.eps), rotary, fb)  # [T, H]


class MambaStackForCausalLM(RecurrentStateForCausalLM):
    LAYER_KIND = "recurrent (Mamba)"
    TP_REASON = " (its Mamba mixers run on one rank)"

    def make_states(self, config: ModelConfig, dtype, device) -> RecurrentStates:
        if config.mamba2 is not None:
            return mamba2_states(config.mamba2, dtype, device)
        return mamba1_states(config.mamba1, dtype, device)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        c = self.config
        if c.mamba2 is not None:
            mixer = Mamba2Mixer(c.mamba2, layer_id, self.states, c.hidden_size, c.rms_norm_eps, dtype, device)
        else:
            mixer = MambaMixer(c.mamba1, layer_id, self.states, c.hidden_size, dtype, device)
        return MambaStackBlock(c, mixer, dtype, device)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        x = super().embed_inputs(fb)  # [T, H]
        return x.float() if self.config.residual_in_fp32 else x  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps).to(self.dtype)  # [T, H]

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.mixer, name) for name in layer.mixer.LINEARS]
        return swaps

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, mixer = f"model.layers.{i}.", layer.mixer
            t[p + "norm.weight"] = (layer.norm, False)
            t.update(mixer.targets(p + "mixer.") if isinstance(mixer, MambaMixer)
                     else mixer_targets(p + "mixer.", mixer))
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_our_name(name), tensor) for name, tensor in named_tensors)


def _our_name(name: str) -> str:
    """A checkpoint name in Llama's outer names: backbone. -> model., embeddings -> embed_tokens, norm_f -> norm."""
    if name.startswith("backbone."):
        name = "model." + name[len("backbone."):]
    return _OUTER_NAMES.get(name, name)
