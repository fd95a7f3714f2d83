"""The ModernBERT decoder (HF ModernBertDecoderForCausalLM: the Ettin decoders; fields: modernbert_config.py) on
Llama's weights and loading (own_layers.py): LayerNormed token embeddings, pre-norm layers of LayerNorms whose bias
is config.modernbert.norm_bias (layer 0 without an attention norm), Llama's attention with q/k/v/o biases where
attention_bias, the full layers rotated at rope_theta and the sliding ones (config.layer_windows, enforced by the
attention backend) at local_rope_theta, the MLP Wi -> act(first half) * second half -> Wo, a final LayerNorm, and
the head dense -> act -> LayerNorm before the decoder (the lm head, tied or not) with its optional bias.
Notation as in llama.py: T tokens, H hidden, V vocab.
"""

import dataclasses
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .gpt_layers import ACTIVATIONS, rename_with
from .layer_ops import Rotary
from .layers import param
from .llama import LlamaAttention, LlamaMLP
from .own_layers import OwnLayersForCausalLM
from .packed_linear import linear
from .rope import rope_cos_sin_cache

_LAYER = r"model\.layers\.(\d+)\."
NAMES = ((r"model\.embeddings\.tok_embeddings\.", "model.embed_tokens."),
         (r"model\.embeddings\.norm\.", "model.embed_norm."),
         (_LAYER + r"attn_norm\.", r"model.layers.\1.input_layernorm."),
         (_LAYER + r"attn\.(q_proj|k_proj|v_proj)\.", r"model.layers.\1.self_attn.\2."),
         (_LAYER + r"attn\.Wo\.", r"model.layers.\1.self_attn.o_proj."),
         (_LAYER + r"mlp_norm\.", r"model.layers.\1.post_attention_layernorm."),
         (_LAYER + r"mlp\.Wi\.", r"model.layers.\1.mlp.Wi."),
         (_LAYER + r"mlp\.Wo\.", r"model.layers.\1.mlp.down_proj."),
         (r"model\.final_norm\.", "model.norm."),
         (r"lm_head\.dense\.", "model.head_dense."), (r"lm_head\.norm\.", "model.head_norm."),
         (r"decoder\.", "lm_head."))


class Norm(nn.Module):
    """HF nn.LayerNorm over the last dim: weight [H], a bias [H] where `bias`."""

    def __init__(self, size: int, eps: float, bias: bool, dtype, device):
        super().__init__()
        self.eps = eps
        self.weight = param(size, dtype=dtype, device=device)  # [H]
        self.bias = param(size, dtype=dtype, device=device) if bias else None  # [H]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)  # [T, H]

    def targets(self, name: str) -> dict:
        t = {name + ".weight": (self.weight, False)}
        if self.bias is not None:
            t[name + ".bias"] = (self.bias, False)
        return t


class ModernBertMLP(LlamaMLP):
    """Wi (gate_up_proj: [input; gate] rows) -> act(input) * gate -> Wo (down_proj), biases where mlp_bias."""

    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__(c, dtype, device)
        self.act = ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        h, gate = linear(x, self.gate_up_proj, self.gate_up_bias, self.gemm_rows).chunk(2, dim=-1)  # [T, I] each
        return linear(self.act(h) * gate, self.down_proj, self.down_bias, self.gemm_rows)  # [T, H]


class ModernBertLayer(nn.Module):
    """x + attn(norm(x)) (layer 0: x + attn(x)), then x + mlp(norm(x))."""

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        bias = c.modernbert.norm_bias
        self.input_layernorm = None if layer_id == 0 else Norm(c.hidden_size, c.rms_norm_eps, bias, dtype, device)
        self.self_attn = LlamaAttention(c, layer_id, attn_backend, dtype, device)
        self.post_attention_layernorm = Norm(c.hidden_size, c.rms_norm_eps, bias, dtype, device)
        self.mlp = ModernBertMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = x if self.input_layernorm is None else self.input_layernorm(x)  # [T, H]
        x = x + self.self_attn(h, rotary, fb)  # [T, H]
        return x + self.mlp(self.post_attention_layernorm(x))  # [T, H]


class ModernBertDecoderForCausalLM(OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with ModernBERT's embeddings norm, layers, rope per layer kind and head."""

    LAYER_KIND = "ModernBERT"
    loads_fp8_checkpoints = False

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, V, eps, layout = config.hidden_size, config.vocab_size, config.rms_norm_eps, config.modernbert
        self.embed_norm = Norm(H, eps, layout.norm_bias, dtype, device)
        self.norm_bias = param(H, dtype=dtype, device=device) if layout.norm_bias else None  # [H], beside self.norm
        self.head_dense = param(H, H, dtype=dtype, device=device)  # [H, H]
        self.head_dense_bias = param(H, dtype=dtype, device=device) if layout.head_bias else None  # [H]
        self.head_act = ACTIVATIONS[layout.head_act]
        self.head_norm = Norm(H, eps, layout.norm_bias, dtype, device)
        self.lm_head_bias = param(V, dtype=dtype, device=device) if layout.decoder_bias else None  # [V]
        local = dataclasses.replace(config, rope_theta=config.local_rope_theta, rope_scaling=None)
        cache = rope_cos_sin_cache(local, max_context or config.context_length)  # [C, D] float32
        self.register_buffer("local_cos_sin", cache.to(device=device, dtype=dtype), persistent=False)  # [C, D]

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return ModernBertLayer(self.config, layer_id, attn_backend, dtype, device)

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        full, local = Rotary(positions, self.cos_sin), Rotary(positions, self.local_cos_sin)
        return [local if window else full for window in self.config.layer_windows or [None] * len(self.layers)]

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embed_norm(super().embed_inputs(fb))  # [T, H]

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.norm, self.norm_bias, self.config.rms_norm_eps)  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> the head transform -> the decoder with its bias: logits [N, V] float32."""
        return linear(self.transform_head(hidden), self.lm_head, self.lm_head_bias, self.gemm_rows).float()  # [N, V]

    def transform_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's dense -> act -> LayerNorm: [N, H] -> [N, H]."""
        return self.head_norm(self.head_act(linear(hidden, self.head_dense, self.head_dense_bias, self.gemm_rows)))

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        t.update(self.embed_norm.targets("model.embed_norm"))
        t.update(self.head_norm.targets("model.head_norm"))
        t["model.head_dense.weight"] = (self.head_dense, False)
        extra = {"model.norm.bias": self.norm_bias, "model.head_dense.bias": self.head_dense_bias,
                 "lm_head.bias": self.lm_head_bias}
        t.update({name: (p, False) for name, p in extra.items() if p is not None})
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        targets = {}
        for name in ("input_layernorm", "post_attention_layernorm"):
            norm = getattr(layer, name)
            if norm is not None:   # layer 0 has no attention norm
                targets.update(norm.targets(prefix + name))
        return targets

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """HF's names as Llama's; Wi's halves as gate_proj (the activated input) and up_proj (the gate)."""
        for name, tensor in named_tensors:
            ours = rename_with(NAMES, name) or name
            if ".mlp.Wi." in ours:
                first, second = tensor.chunk(2, dim=0)
                yield ours.replace(".Wi.", ".gate_proj."), first
                yield ours.replace(".Wi.", ".up_proj."), second
            else:
                yield ours, tensor

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))
