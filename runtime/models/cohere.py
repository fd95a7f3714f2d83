"""Cohere (HF CohereForCausalLM: Command-R): parallel blocks (parallel_block.py) with LayerNorms without bias, Llama's
gated SiLU MLP, optional per-head q/k LayerNorms (use_qk_norm, a weight per head), logits times config.logit_scale,
tied embeddings, and interleaved rotary embeddings: dims (2i, 2i+1) of a head rotate together.

The interleaved rope runs as Llama's rotate-half one: load_weights reads the rows of q_proj and k_proj (their biases
and q/k norm weights) within each head in rope.interleaved_to_half_order, so pair (2i, 2i+1) lands on (i, i + D/2);
q and k reordered alike leave every attention score unchanged, and v is untouched.
"""

from typing import Iterable, Tuple

import torch

from .parallel_block import ParallelBlockForCausalLM
from .rope import interleaved_to_half_order

_ROTATED = (".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.q_norm.", ".self_attn.k_norm.")


def reorder_head_dims(name: str, tensor: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """One checkpoint tensor of q or k with each head's dims in `order` [D]: projection weights [heads*D, H] and
    biases [heads*D] by rows, per-head norm weights [heads, D] by their last dim."""
    if name.endswith("norm.weight"):
        return tensor[..., order]  # [heads, D]
    return tensor.unflatten(0, (-1, order.numel()))[:, order].flatten(0, 1)  # [heads*D, ...]


class CohereForCausalLM(ParallelBlockForCausalLM):
    loads_fp8_checkpoints = False  # the rows reordered within each head would split FP8 block scales

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream with q's and k's rows in rotate-half order (see the module docstring)."""
        c = self.config
        order = interleaved_to_half_order(c.head_dim, c.rope_dim)
        for name, tensor in named_tensors:
            yield name, reorder_head_dims(name, tensor, order) if any(p in name for p in _ROTATED) else tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))
