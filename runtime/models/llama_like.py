"""ERNIE 4.5 (dense), Hunyuan (dense), Arcee (AFM) and EXAONE 4: the Llama family's weights with one difference each
(Ministral and Seed-OSS need none: llama.py with their config fields, llama_like_config.py).

- ERNIE 4.5 rotates interleaved pairs of every head dim: run as rotate-half on q/k rows reordered at load
  (interleaved_rope.py); otherwise Llama's layer, so the native one-call decode runs it.
- Hunyuan normalises each head of q and k after rope (config.qk_norm_after_rope); its checkpoint names those norms
  query_layernorm and key_layernorm.
- Arcee's MLP is not gated: down_proj(relu(up_proj(x)) ** 2).
- EXAONE 4 is OLMo 2's post-norm layer with Llama's attention (per-head q/k norms before rope, no rope on the
  full-attention layers of a windowed model) and Llama's RMSNorm (cast before the weight multiplies).
None of them runs with tensor parallelism, GGUF weights kept quantized or FP8 checkpoints (unverified); Arcee and
EXAONE 4 have no native one-call decode, and Arcee no --quantization fp8 (its MLP is not in fp8_model.py's layouts).
Notation as in llama.py: T tokens, H hidden, I intermediate.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .interleaved_rope import InterleavedRopeWeights
from .layer_ops import rms_norm
from .layers import param
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM
from .olmo2 import Olmo2DecoderLayer, Olmo2ForCausalLM, post_norm_targets
from .packed_linear import linear


class OneRankLlama(LlamaForCausalLM):
    """LlamaForCausalLM refusing what is unverified for these families: tensor parallelism, GGUF kept quantized and
    FP8 checkpoints (--quantization fp8 quantizes their dense checkpoints)."""

    loads_gguf_weights = False
    loads_fp8_checkpoints = False

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported")


class Ernie4_5ForCausalLM(InterleavedRopeWeights, OneRankLlama):
    """Llama's layer on q/k rows in rotate-half order."""


class HunYuanDenseV1ForCausalLM(OneRankLlama):
    """Llama's layer with q/k norms after rope (config.qk_norm_after_rope), its checkpoint's norm names read as Qwen3's."""

    NORM_NAMES = {".self_attn.query_layernorm.": ".self_attn.q_norm.", ".self_attn.key_layernorm.": ".self_attn.k_norm."}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        for name, tensor in named_tensors:
            for theirs, ours in self.NORM_NAMES.items():
                name = name.replace(theirs, ours)
            yield name, tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


class ReluSquaredMLP(nn.Module):
    """Arcee's MLP: up_proj, relu squared, down_proj."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.up_proj = param(c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [I, H]
        self.down_proj = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.gemm_rows: Optional[int] = None  # see LlamaForCausalLM.make_batch_invariant
        self.tp = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        up = linear(x, self.up_proj, None, self.gemm_rows)  # [T, I]
        return linear(self.activation(up), self.down_proj, None, self.gemm_rows)  # [T, H]

    @staticmethod
    def activation(up: torch.Tensor) -> torch.Tensor:
        return torch.relu(up).square()  # [T, I]


class ArceeForCausalLM(OneRankLlama):
    """Llama's layer with ReluSquaredMLP."""

    quantizes_to_fp8 = False
    MLP_LINEARS = ("up_proj", "down_proj")

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        mlp = ReluSquaredMLP(self.config, dtype, device)
        return LlamaDecoderLayer(self.config, layer_id, attn_backend, dtype, device, mlp=mlp)

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s relu^2 MLP is not in the native one-call decode"

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        p = f"model.layers.{layer_id}.mlp."
        return {p + "up_proj.weight": (mlp.up_proj, False), p + "down_proj.weight": (mlp.down_proj, False)}


class Exaone4DecoderLayer(Olmo2DecoderLayer):
    """x + norm(attn(x)), then x + norm(mlp(x)), with Llama's attention and RMSNorm."""

    attention_class = LlamaAttention
    rms_norm = staticmethod(rms_norm)


class Exaone4ForCausalLM(Olmo2ForCausalLM):
    """OLMo 2's model with EXAONE 4's layers, whose q/k norm weights Llama's loading reads."""

    TP_REASON = ""
    layer_class = Exaone4DecoderLayer

    def _norm_targets(self, prefix: str, layer) -> dict:
        return post_norm_targets(prefix, layer)
