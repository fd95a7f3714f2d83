"""IBM Bamba (HF BambaForCausalLM): Granite 4.0's dense stack (granite_hybrid.py) without its multipliers: Mamba-2
mixers (mamba2.py, HF's BambaMixer itself) and Llama attention rotating the first half of each head, each followed by a
SwiGLU MLP.  Checkpoint names: mamba.*, self_attn.*, feed_forward.{gate, up, down}_proj, input_layernorm,
pre_ff_layernorm and model.final_layernorm, read as Granite 4.0's.
"""

from typing import Iterable, Tuple

import torch

from .granite_hybrid import GraniteMoeHybridForCausalLM

_GRANITE_NAMES = ((".feed_forward.", ".mlp.shared_experts."), (".pre_ff_layernorm.", ".post_attention_layernorm."),
                  ("model.final_layernorm.", "model.norm."))


class BambaForCausalLM(GraniteMoeHybridForCausalLM):
    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights((_granite_name(name), tensor) for name, tensor in named_tensors)


def _granite_name(name: str) -> str:
    for ours, granite in _GRANITE_NAMES:
        name = name.replace(ours, granite)
    return name
