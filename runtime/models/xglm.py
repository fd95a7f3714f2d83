"""XGLM (HF XGLMForCausalLM) on the GPT layers (gpt_layers.py): fairseq's fixed sinusoidal positions added to the token
embeddings times sqrt(d_model) (gpt_config._xglm), pre-LayerNorms with biases (self_attn_layer_norm, final_layer_norm),
q/k/v/out projections and fc1 -> act -> fc2 with biases, a final layer_norm, the lm head tied to the embeddings.
Notation as in llama.py: H hidden, P positions.
"""

import math
from typing import Optional

import torch

from radixlm.runtime.models.config import ModelConfig

from .gpt_layers import GptForCausalLM


def sinusoidal_positions(rows: int, dim: int) -> torch.Tensor:
    """[rows, dim] float32: row p holds sin(p * f_i), then cos(p * f_i), f_i = 10000 ** (-i / (dim/2 - 1)) (a zero
    column for an odd dim); HF XGLMSinusoidalPositionalEmbedding.get_embedding without its padding row."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))  # [dim/2]
    angles = torch.arange(rows, dtype=torch.int64).float().unsqueeze(1) * freqs.unsqueeze(0)  # [rows, dim/2]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # [rows, 2 * (dim/2)]
    return torch.cat([table, torch.zeros(rows, dim % 2)], dim=1)  # [rows, dim]


class XGLMForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with XGLM's names; its position table computed, not loaded."""

    PREFIX = "model."
    NAMES = ((r"embed_tokens\.", "model.embed_tokens."), (r"layer_norm\.", "model.norm."),
             (r"layers\.(\d+)\.self_attn_layer_norm\.", r"model.layers.\1.input_layernorm."),
             (r"layers\.(\d+)\.final_layer_norm\.", r"model.layers.\1.post_attention_layernorm."),
             (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
             (r"layers\.(\d+)\.self_attn\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"layers\.(\d+)\.fc1\.", r"model.layers.\1.mlp.c_fc."),
             (r"layers\.(\d+)\.fc2\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = r"embed_positions\.weights?"   # the table, where a checkpoint saved it

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        rows, dim = self.embed_positions.shape
        with torch.no_grad():
            self.embed_positions.copy_(self.position_table(rows, dim))  # [P, H]

    def position_table(self, rows: int, dim: int) -> torch.Tensor:
        """The fixed [rows, dim] position table (early_gpt.py: CTRL's own)."""
        return sinusoidal_positions(rows, dim)

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        del t["model.embed_positions.weight"]
        return t
