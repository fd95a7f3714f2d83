"""GPT-1 (HF OpenAIGPTLMHeadModel), BioGPT (HF BioGptForCausalLM) and CTRL (HF CTRLLMHeadModel) on the GPT layers
(gpt_layers.py), their fields read by early_gpt_config.py.

GPT-1: GPT-2's names and Conv1D weights (gpt2.py) under tokens_embed / positions_embed, OPT's post-norm layers
(opt.py: ln_1(x + attn(x)), then ln_2(x + mlp(x))) and no final norm, the lm head tied.
BioGPT: XGLM's layer names (xglm.py) under "biogpt.", learned positions at offset 2, scaled token embeddings, the
output_projection tied to the embeddings.
CTRL: its fixed sinusoidal table (row p: sin(p * f_j) for j < dim/2, then cos(p * f_j), f_j = 10000 ** (-2j / dim)),
Wq / Wk / Wv / dense, the MLP ffn.0 -> relu -> ffn.2, layernorm1 / layernorm2 before each sublayer, a final
layernorm, the lm head tied with a bias.
GPT-NeoX-Japanese: GPT-NeoX's names (gpt_neox.py) under "gpt_neox_japanese.", its sequential layer, the attention's
output bias of the last layer alone (dense_bias; the others' stay zero).
Notation as in llama.py: P positions, H hidden.
"""

import torch

from .gpt2 import GPT2LMHeadModel
from .gpt_layers import GptForCausalLM
from .gpt_neox import GPTNeoXForCausalLM
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


class GPTNeoXJapaneseForCausalLM(GPTNeoXForCausalLM):
    """GPT-NeoX's contract with its Japanese names; an attention output bias in the last layer only."""

    PREFIX = "gpt_neox_japanese."
    NAMES = ((r"layers\.(\d+)\.attention\.dense_bias", r"model.layers.\1.self_attn.o_proj.bias"),
             *GPTNeoXForCausalLM.NAMES)
    SKIPPED = None

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        with torch.no_grad():
            for layer in self.layers[:-1]:
                layer.self_attn.o_bias.zero_()

    def _weight_targets(self) -> dict:
        last = f"model.layers.{len(self.layers) - 1}."
        return {name: t for name, t in super()._weight_targets().items()
                if not name.endswith("self_attn.o_proj.bias") or name.startswith(last)}
