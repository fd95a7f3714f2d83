"""GPT-1 (HF OpenAIGPTLMHeadModel), BioGPT (HF BioGptForCausalLM) and CTRL (HF CTRLLMHeadModel) on the GPT layers
(gpt_layers.py), their fields read by early_gpt_config.py.

GPT-1: GPT-2's names and Conv1D weights (gpt2.py) under tokens_embed / positions_embed, OPT's post-norm layers
(opt.py: ln_1(x + attn(x)), then ln_2(x + mlp(x))) and no final norm, the lm head tied.
BioGPT: XGLM's layer names (xglm.py) under "biogpt.", learned positions at offset 2, scaled token embeddings, the
output_projection tied to the embeddings.
CTRL: its fixed sinusoidal table (row p: sin(p * f_j) for j < dim/2, then cos(p * f_j), f_j = 10000 ** (-2j / dim)),
Wq / Wk / Wv / dense, the MLP ffn.0 -> relu -> ffn.2, layernorm1 / layernorm2 before each sublayer, a final
layernorm, the lm head tied with a bias.
Notation as in llama.py: P positions, H hidden.
"""

import torch

from .gpt2 import GPT2LMHeadModel
from .gpt_layers import GptForCausalLM
from .opt import OPTForCausalLM
from .xglm import XGLMForCausalLM


class OpenAIGPTLMHeadModel(GPT2LMHeadModel, OPTForCausalLM):
    """GPT-2's loading (Conv1D weights) with OPT's post-norm layers (config.gpt.post_norm)."""

    PREFIX = "transformer."
    NAMES = ((r"tokens_embed\.", "model.embed_tokens."), (r"positions_embed\.", "model.embed_positions."),
             (r"h\.(\d+)\.ln_1\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.ln_2\.", r"model.layers.\1.post_attention_layernorm."),
             (r"h\.(\d+)\.attn\.c_attn\.", r"model.layers.\1.self_attn.qkv."),
             (r"h\.(\d+)\.attn\.c_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.c_", r"model.layers.\1.mlp.c_"))
    SKIPPED = r"h\.\d+\.attn\.bias|position_ids"   # the causal masks and positions HF keeps as buffers


class BioGptForCausalLM(GptForCausalLM):
    """GptForCausalLM's contract with BioGPT's names."""

    PREFIX = "biogpt."
    NAMES = ((r"embed_positions\.", "model.embed_positions."), (r"output_projection\.", "lm_head."),
             *XGLMForCausalLM.NAMES)


def ctrl_positions(rows: int, dim: int) -> torch.Tensor:
    """[rows, dim] float32: HF CTRL's positional_encoding (sines of the even angle columns, then cosines of the odd;
    columns 2j and 2j + 1 share the frequency 10000 ** (-2j / dim))."""
    cols = torch.arange(dim, dtype=torch.int64).float()  # [dim]
    angles = torch.arange(rows, dtype=torch.int64).float().unsqueeze(1) / torch.pow(10000, 2 * (cols // 2) / dim)
    return torch.cat([torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])], dim=1)  # [rows, dim]


class CTRLLMHeadModel(XGLMForCausalLM):
    """XGLM's computed position table with CTRL's own and its names; an lm head bias."""

    LM_HEAD_BIAS = True
    PREFIX = "transformer."
    NAMES = ((r"w\.", "model.embed_tokens."), (r"layernorm\.", "model.norm."),
             (r"h\.(\d+)\.layernorm1\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.layernorm2\.", r"model.layers.\1.post_attention_layernorm."),
             (r"h\.(\d+)\.multi_head_attention\.Wq\.", r"model.layers.\1.self_attn.q_proj."),
             (r"h\.(\d+)\.multi_head_attention\.Wk\.", r"model.layers.\1.self_attn.k_proj."),
             (r"h\.(\d+)\.multi_head_attention\.Wv\.", r"model.layers.\1.self_attn.v_proj."),
             (r"h\.(\d+)\.multi_head_attention\.dense\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.ffn\.0\.", r"model.layers.\1.mlp.c_fc."),
             (r"h\.(\d+)\.ffn\.2\.", r"model.layers.\1.mlp.c_proj."))
    SKIPPED = None

    def position_table(self, rows: int, dim: int) -> torch.Tensor:
        return ctrl_positions(rows, dim)  # [P, H]
