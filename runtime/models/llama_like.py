"""ERNIE 4.5 (dense), Helium, Hunyuan (dense), Arcee (AFM), Apertus, NanoChat and EXAONE 4: the Llama family's weights
with one to four differences each (Ministral and Seed-OSS need none: llama.py with their config fields, llama_like_config.py;
nor does CWM, whose sliding and full layers are config fields, more_dense_config.py, but it runs on one rank only).

- ERNIE 4.5 rotates interleaved pairs of every head dim: run as rotate-half on q/k rows reordered at load
  (interleaved_rope.py); otherwise Llama's layer, so the native one-call decode runs it.  So does Helium.
- Hunyuan normalises each head of q and k after rope (config.qk_norm_after_rope); its checkpoint names those norms
  query_layernorm and key_layernorm.
- Arcee's MLP is not gated: down_proj(relu(up_proj(x)) ** 2).  Apertus's neither: down_proj(xielu(up_proj(x))),
  with per-head q/k norms before rope and its own names for the two pre-norms.  NanoChat's is Arcee's, with weightless
  norms, its embeddings normalised, q/k norms after rope, rope the other way round and its logits soft-capped.
- EXAONE 4 is OLMo 2's post-norm layer with Llama's attention (per-head q/k norms before rope, no rope on the
  full-attention layers of a windowed model) and Llama's RMSNorm (cast before the weight multiplies).
None of them runs with tensor parallelism, GGUF weights kept quantized or FP8 checkpoints (unverified); Arcee, Apertus,
NanoChat and EXAONE 4 have no native one-call decode, and Arcee, Apertus and NanoChat no --quantization fp8 (their MLP is not in
fp8_model.py's layouts).
Notation as in llama.py: T tokens, H hidden, I intermediate.
"""

from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .interleaved_rope import InterleavedRopeWeights
from .layer_ops import rms_norm
from .layers import param, soft_cap
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


class CwmForCausalLM(OneRankLlama):
    """Llama's layer; its sliding and full layers are config.layer_windows (more_dense_config.py)."""


class Ernie4_5ForCausalLM(InterleavedRopeWeights, OneRankLlama):
    """Llama's layer on q/k rows in rotate-half order."""


class RenamedCheckpoint:
    """Mixin of a LlamaForCausalLM subclass whose checkpoint names some tensors otherwise: NAMES maps a part of their
    names to ours."""

    NAMES: dict = {}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        for name, tensor in named_tensors:
            for theirs, ours in self.NAMES.items():
                name = name.replace(theirs, ours)
            yield name, tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(self.checkpoint_tensors(named_tensors))


class HunYuanDenseV1ForCausalLM(RenamedCheckpoint, OneRankLlama):
    """Llama's layer with q/k norms after rope (config.qk_norm_after_rope), its checkpoint's norm names read as Qwen3's."""

    NAMES = {".self_attn.query_layernorm.": ".self_attn.q_norm.", ".self_attn.key_layernorm.": ".self_attn.k_norm."}


class HeliumForCausalLM(Ernie4_5ForCausalLM):
    """Llama's layer on q/k rows in rotate-half order (q/k/v biases by attention_bias, no o_proj bias).  HF's Helium
    RMSNorm multiplies by its weight before casting back, Llama's after: equal in float32, one rounding apart in
    bfloat16."""


class ReluSquaredMLP(nn.Module):
    """Arcee's and Nemotron's MLP: up_proj, relu squared, down_proj (biases on both where config.mlp_bias)."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.up_proj = param(c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [I, H]
        self.down_proj = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.up_bias = param(c.intermediate_size, dtype=dtype, device=device) if c.mlp_bias else None  # [I]
        self.down_bias = param(c.hidden_size, dtype=dtype, device=device) if c.mlp_bias else None  # [H]
        self.gemm_rows: Optional[int] = None  # see LlamaForCausalLM.make_batch_invariant
        self.tp = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        up = linear(x, self.up_proj, self.up_bias, self.gemm_rows)  # [T, I]
        return linear(self.activation(up), self.down_proj, self.down_bias, self.gemm_rows)  # [T, H]

    @staticmethod
    def activation(up: torch.Tensor) -> torch.Tensor:
        return torch.relu(up).square()  # [T, I]

    def targets(self, prefix: str) -> dict:
        """HF name -> (destination, broadcast allowed) of this MLP called `prefix` ("model.layers.0.mlp.")."""
        t = {prefix + "up_proj.weight": (self.up_proj, False), prefix + "down_proj.weight": (self.down_proj, False)}
        if self.up_bias is not None:
            t.update({prefix + "up_proj.bias": (self.up_bias, False), prefix + "down_proj.bias": (self.down_bias, False)})
        return t


class XieluMLP(ReluSquaredMLP):
    """Apertus's MLP: up_proj, xIELU with its checkpoint's scalars (learned alpha_p and alpha_n, beta, eps), down_proj."""

    SCALARS = ("alpha_p", "alpha_n", "beta", "eps")

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__(c, dtype, device)
        for name in self.SCALARS:
            setattr(self, name, param(1, dtype=dtype, device=device))  # [1]

    def activation(self, up: torch.Tensor) -> torch.Tensor:
        """HF XIELUActivation's torch path: a_p x^2 + beta x where x > 0, else (expm1(min(x, eps)) - x) a_n + beta x,
        with a_p = softplus(alpha_p) and a_n = beta + softplus(alpha_n).  up: [T, I] -> [T, I]."""
        alpha_p = F.softplus(self.alpha_p)  # [1]
        alpha_n = self.beta + F.softplus(self.alpha_n)  # [1]
        linear_part = self.beta * up  # [T, I]
        negative = (torch.expm1(torch.minimum(up, self.eps)) - up) * alpha_n + linear_part  # [T, I]
        return torch.where(up > 0, alpha_p * up * up + linear_part, negative)  # [T, I]

    def targets(self, prefix: str) -> dict:
        scalars = {f"{prefix}act_fn.{name}": (getattr(self, name), "scalar") for name in self.SCALARS}
        return dict(super().targets(prefix), **scalars)


class ArceeForCausalLM(OneRankLlama):
    """Llama's layer with ReluSquaredMLP."""

    quantizes_to_fp8 = False
    MLP_LINEARS = ("up_proj", "down_proj")
    mlp_class = ReluSquaredMLP

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        mlp = self.mlp_class(self.config, dtype, device)
        return LlamaDecoderLayer(self.config, layer_id, attn_backend, dtype, device, mlp=mlp)

    def enable_native_decode(self) -> Optional[str]:
        self.native_decode = None
        return f"{self.config.architecture}'s non-gated MLP is not in the native one-call decode"

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        return mlp.targets(f"model.layers.{layer_id}.mlp.")


class ApertusForCausalLM(RenamedCheckpoint, ArceeForCausalLM):
    """Llama's layer with per-head q/k norms (config.qk_norm) and XieluMLP; its checkpoint names the two pre-norms
    attention_layernorm and feedforward_layernorm."""

    NAMES = {".attention_layernorm.": ".input_layernorm.", ".feedforward_layernorm.": ".post_attention_layernorm."}
    mlp_class = XieluMLP


class NanoChatForCausalLM(RenamedCheckpoint, ArceeForCausalLM):
    """Llama's layer with the relu^2 MLP (its checkpoint's fc1 and fc2) and q/k norms after rope (config), where:
    - no RMSNorm has a weight: ours hold ones, set at load;
    - the embeddings are normalised before the first layer: a function of each token alone, applied to embed_tokens'
      rows at load (untied: config);
    - rope rotates the other way (HF's rotate_half gives (x2, -x1)): run as ours on q/k rows whose second half of each
      head is negated at load, q and k alike, so every score is HF's (the weightless norms commute with the negation);
    - logits are soft-capped (config.final_softcap)."""

    NAMES = {".mlp.fc1.": ".mlp.up_proj.", ".mlp.fc2.": ".mlp.down_proj."}
    WEIGHTLESS = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
                  "self_attn.k_norm.weight", "model.norm.weight")

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream with each q/k head's second half of rows (weights [heads*D, H], biases) negated."""
        dim = self.config.head_dim
        sign = torch.cat([torch.ones(dim // 2), -torch.ones(dim - dim // 2)])  # [D]
        for name, tensor in super().checkpoint_tensors(named_tensors):
            if ".self_attn.q_proj." in name or ".self_attn.k_proj." in name:
                rows = tensor.unflatten(0, (-1, dim))  # [heads, D, ...]
                tensor = (rows * sign.view(1, dim, *[1] * (rows.dim() - 2)).to(rows.dtype)).flatten(0, 1)
            yield name, tensor

    def _weight_targets(self) -> dict:
        return {name: t for name, t in super()._weight_targets().items() if not name.endswith(self.WEIGHTLESS)}

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(named_tensors)
        self.norm.fill_(1.0)
        for layer in self.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm, layer.self_attn.qk_norm):
                norm.fill_(1.0)
        self.embed_tokens.copy_(rms_norm(self.embed_tokens, self.norm, self.config.rms_norm_eps))  # [V, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return soft_cap(super().compute_logits(hidden), self.config.final_softcap)  # [N, V]


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
