"""Interleaved rotary embeddings (HF Cohere, GLM-4: dims 2i and 2i+1 of a head rotate together by frequency i) run
as the rotate-half rope of layer_ops.Rotary (dims i and i + R/2), with no second rotation kernel.

A model takes InterleavedRopeWeights before its LlamaForCausalLM base: its checkpoint's q and k projection rows (their
biases and per-head q/k norm weights too) are read with each head's dims in interleaved_to_half_order, so pair
(2i, 2i+1) lands on (i, i + R/2) and dims from R on keep their place.  q and k reordered alike leave every attention
score q.k unchanged, and v is untouched, so the attention output is HF's.
"""

from typing import Iterable, Tuple

import torch

_ROTATED = (".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.q_norm.", ".self_attn.k_norm.")


def interleaved_to_half_order(head_dim: int, rope_dim: int) -> torch.Tensor:
    """[D] int64: new dim j of a head is old dim order[j]: the even rotated dims, the odd ones, then the rest."""
    return torch.cat([torch.arange(0, rope_dim, 2), torch.arange(1, rope_dim, 2), torch.arange(rope_dim, head_dim)])


def reorder_head_dims(name: str, tensor: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """One checkpoint tensor of q or k with each head's dims in `order` [D]: projection weights [heads*D, H] and
    biases [heads*D] by rows, per-head norm weights [heads, D] by their last dim."""
    if name.endswith("norm.weight"):
        return tensor[..., order]  # [heads, D]
    return tensor.unflatten(0, (-1, order.numel()))[:, order].flatten(0, 1)  # [heads*D, ...]


class InterleavedRopeWeights:
    """Mixin of a LlamaForCausalLM subclass whose checkpoint rotates interleaved pairs.  FP8 checkpoints are refused:
    rows reordered within each head would split their block scales."""

    loads_fp8_checkpoints = False

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream with q's and k's rows in rotate-half order."""
        c = self.config
        order = interleaved_to_half_order(c.head_dim, c.rope_dim)
        for name, tensor in named_tensors:
            yield name, reorder_head_dims(name, tensor, order) if any(p in name for p in _ROTATED) else tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))
