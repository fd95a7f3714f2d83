"""MiniCPM 5 MoE (HF MiniCPM5MoeForCausalLM): Llama's pre-norm layers whose attention output is gated per head dim
by sigmoid(gate), the gate coming from the q projection (q_gate_proj: [q_h | gate_h] per head, as Qwen3-Next's), and
DeepSeek-V3's experts (moe_config.py) in the sparse layers of mlp_layer_types, the dense SwiGLU MLP elsewhere.

qkv_proj holds [q | k | v | gate] rows.  transformers 5 names the checkpoint's q_proj q_gate_proj in its module and
saves it back as q_proj; both names are read.  No attention biases, tensor parallelism or FP8.
Notation as in llama.py: T tokens, H hidden, Hq/Hkv heads, D head_dim.
"""

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP
from .minimax_m2 import MiniMaxM2ForCausalLM
from .moe import SparseMoeBlock
from .packed_linear import linear
from .qwen3_next import _Interleaved


class OutputGatedAttention(LlamaAttention):
    """Llama's attention, its output times sigmoid(gate) before o_proj."""

    def __init__(self, c, layer_id: int, attn_backend, dtype, device):
        super().__init__(c, layer_id, attn_backend, dtype, device)
        self.qkv_proj = param(2 * self.q_size + 2 * self.kv_size, c.hidden_size, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv, D = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv, gate = linear(x, self.qkv_proj).split([self.q_size + 2 * self.kv_size, self.q_size], dim=1)
        qkv = qkv.view(T, hq + 2 * hkv, D)  # [T, Hq+2Hkv, D]
        qk = rotary.apply_(qkv[:, :hq + hkv])  # [T, Hq+Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(T, self.q_size) * torch.sigmoid(gate), self.o_proj)  # [T, Hq*D] -> [T, H]


class MiniCPM5MoeDecoderLayer(LlamaDecoderLayer):
    attention_class = OutputGatedAttention


class MiniCPM5MoeForCausalLM(MiniMaxM2ForCausalLM):
    """MoEForCausalLM's contract on one rank, with dense layers where mlp_layer_types says so."""

    quantizes_to_fp8 = False
    decoder_layer_class = MiniCPM5MoeDecoderLayer

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        c = self.config
        sparse = layer_id in c.moe.sparse_layers
        mlp = SparseMoeBlock(c.hidden_size, c.moe, dtype, device) if sparse else LlamaMLP(c, dtype, device)
        return self.decoder_layer_class(c, layer_id, attn_backend, dtype, device, mlp=mlp)

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported (its gate rows sit in "
                         "the q projection)")

    def _weight_targets(self) -> dict:
        t = super(MiniMaxM2ForCausalLM, self)._weight_targets()
        for i, layer in enumerate(self.layers):
            p, attn = f"model.layers.{i}.self_attn.", layer.self_attn
            t[p + "q_proj.weight"] = (_Interleaved(attn.qkv_proj, attn.q_size, attn.kv_size, attn.head_dim), False)
        return t

    def load_weights(self, named_tensors) -> None:
        """MoEForCausalLM.load_weights with q_gate_proj read as q_proj."""
        super().load_weights((name.replace(".self_attn.q_gate_proj.", ".self_attn.q_proj."), tensor)
                             for name, tensor in named_tensors)
