"""StarCoder2 (HF Starcoder2ForCausalLM): pre-norm layers of LayerNorms with a bias (layernorm_model.py), the Llama
attention with biases on q/k/v/o (config.attention_bias, o_proj_bias: HF use_bias), a non-gated MLP
c_proj(gelu(c_fc(x))) with biases (config.mlp_bias) and the sliding window on every layer (config.layer_windows,
enforced by the attention backend).  Notation as in llama.py: T tokens, H hidden, I intermediate.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .layer_ops import Rotary
from .layernorm_model import LayerNorm, LayerNormForCausalLM
from .layers import param
from .llama import LlamaAttention
from .packed_linear import linear


class Starcoder2MLP(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.approximate = "tanh" if c.hidden_act == "gelu_tanh" else "none"
        self.c_fc = param(c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [I, H]
        self.c_fc_bias = param(c.intermediate_size, dtype=dtype, device=device) if c.mlp_bias else None  # [I]
        self.c_proj = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.c_proj_bias = param(c.hidden_size, dtype=dtype, device=device) if c.mlp_bias else None  # [H]
        self.gemm_rows: Optional[int] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        h = F.gelu(linear(x, self.c_fc, self.c_fc_bias, self.gemm_rows), approximate=self.approximate)  # [T, I]
        return linear(h, self.c_proj, self.c_proj_bias, self.gemm_rows)  # [T, H]


class Starcoder2DecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)) (Nemotron's and OLMo's with their own norm_class and mlp_class)."""

    norm_class = LayerNorm
    mlp_class = Starcoder2MLP

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.input_layernorm = self.norm_class(c.hidden_size, c.rms_norm_eps, dtype, device)
        self.post_attention_layernorm = self.norm_class(c.hidden_size, c.rms_norm_eps, dtype, device)
        self.self_attn = LlamaAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = self.mlp_class(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attn(self.input_layernorm(x), rotary, fb)  # [T, H]
        return x + self.mlp(self.post_attention_layernorm(x))  # [T, H]


class Starcoder2ForCausalLM(LayerNormForCausalLM):
    """LayerNormForCausalLM's contract with StarCoder2's layers."""

    loads_fp8_checkpoints = False  # fp8_model's checkpoint layouts name the Llama MLP's projections
    MLP_LINEARS = ("c_fc", "c_proj")

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return Starcoder2DecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        """The MLP's biases (fp8_model.fused_linears names its weights)."""
        p = f"model.layers.{layer_id}.mlp."
        if mlp.c_fc_bias is None:
            return {}
        return {p + "c_fc.bias": (mlp.c_fc_bias, False), p + "c_proj.bias": (mlp.c_proj_bias, False)}
