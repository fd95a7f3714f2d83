"""RoFormer (HF RoFormerForCausalLM, is_decoder=True) on the BERT-like decoder (bert_decoder.py): no learned positions;
q and k rotate in interleaved pairs (dims 2i, 2i+1 by angle i) with the sines and cosines of its table
(encoder.embed_positions [P, D]: sin in [:, :D/2], cos in [:, D/2:]), read from the checkpoint (or HF's sinusoids where
it holds none), run as layer_ops.Rotary's rotate-half rope on q/k rows reordered at load (interleaved_rope.py).
Notation as in llama.py: P positions, D head_dim.
"""

from typing import Iterable, Tuple

import torch

from .bart_decoder import pegasus_positions
from .bert_decoder import LAYER_NAMES, BertDecoderForCausalLM
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims

TABLE = "model.rotary_table.weight"


class RoFormerDecoderForCausalLM(BertDecoderForCausalLM):
    """The BERT-like decoder whose rotary cache is RoFormer's table."""

    NAMES = ((r"encoder\.embed_positions\.", "model.rotary_table."), *LAYER_NAMES)

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream with q's and k's rows in rotate-half order; the table taken as the rotary cache."""
        order = interleaved_to_half_order(self.config.head_dim, self.config.head_dim)
        table = None
        for name, tensor in super().checkpoint_tensors(named_tensors):
            if name == TABLE:
                table = tensor
            elif ".self_attn.q_proj." in name or ".self_attn.k_proj." in name:
                yield name, reorder_head_dims(name, tensor, order)
            else:
                yield name, tensor
        self.use_table(pegasus_positions(self.config.max_position_embeddings, self.config.head_dim)
                       if table is None else table)

    def use_table(self, table: torch.Tensor) -> None:
        """RoFormer's [P, D] table (sines, then cosines) as the rotary cache [P, D] (cosines, then sines)."""
        sin, cos = table.float().chunk(2, dim=-1)  # [P, D/2] each
        self.cos_sin = torch.cat([cos, sin], dim=-1).to(dtype=self.cos_sin.dtype, device=self.cos_sin.device)
