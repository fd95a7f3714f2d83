"""MiniMax-M2 (HF MiniMaxM2ForCausalLM): the Llama decoder with a SparseMoeBlock in every layer (moe_model.py; sigmoid
routing with a correction bias: moe_config.py), partial rotary (the first rotary_dim dims of each head, rotate-half
pairs) and q/k RMSNorms over the whole q and k projections (widths Hq*D and Hkv*D, not per head), before rope.

The whole-width norms keep LlamaAttention's qk_norm weight [Hq+Hkv, D]: rows :Hq are q_norm.weight [Hq*D] viewed per
head, the others k_norm.weight.  No tensor parallelism: those norms would need every rank's heads.
Notation as in llama.py: T tokens, Hq/Hkv heads, D head_dim.
"""

import torch

from .layer_ops import rms_norm
from .llama import LlamaAttention, LlamaDecoderLayer
from .moe_model import MoEForCausalLM


class WholeWidthQKNormAttention(LlamaAttention):
    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """qk [T, Hq+Hkv, D] -> [T, Hq+Hkv, D]: q's heads normalised together, then k's."""
        t, hq, d = qk.shape[0], self.num_heads, self.head_dim
        q = rms_norm(qk[:, :hq].reshape(t, hq * d), self.qk_norm[:hq].reshape(-1), self.eps)    # [T, Hq*D]
        k = rms_norm(qk[:, hq:].reshape(t, -1), self.qk_norm[hq:].reshape(-1), self.eps)         # [T, Hkv*D]
        return torch.cat((q.view(t, hq, d), k.view(t, -1, d)), dim=1)                            # [T, Hq+Hkv, D]


class MiniMaxM2DecoderLayer(LlamaDecoderLayer):
    attention_class = WholeWidthQKNormAttention


class MiniMaxM2ForCausalLM(MoEForCausalLM):
    """MoEForCausalLM's contract on one rank."""

    loads_fp8_checkpoints = False
    decoder_layer_class = MiniMaxM2DecoderLayer   # olmoe.py: its own attention

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        from .moe import SparseMoeBlock

        c = self.config
        return self.decoder_layer_class(c, layer_id, attn_backend, dtype, device,
                                     mlp=SparseMoeBlock(c.hidden_size, c.moe, dtype, device))

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported (its q/k norms span every "
                         "head)")

    def _weight_targets(self) -> dict:
        t, hq = super()._weight_targets(), self.config.num_heads
        for i, layer in enumerate(self.layers):
            p, norm = f"model.layers.{i}.self_attn.", layer.self_attn.qk_norm
            t[p + "q_norm.weight"] = (norm[:hq].view(-1), False)     # [Hq*D]
            t[p + "k_norm.weight"] = (norm[hq:].view(-1), False)     # [Hkv*D]
        return t
