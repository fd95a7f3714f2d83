"""GPT-2 (HF GPT2LMHeadModel), GPT-BigCode (HF GPTBigCodeForCausalLM: StarCoder 1, SantaCoder) and GPT-Neo (HF
GPTNeoForCausalLM: its q/k/v/out_proj under attn.attention, local layers with a window, unscaled scores) on the GPT layers
(gpt_layers.py): learned absolute positions (wpe), pre-LayerNorms with biases (ln_1, ln_2, ln_f), a fused c_attn
with its bias, c_proj, the MLP c_fc -> act -> c_proj with biases, scores scaled by head_dim ** -0.5 (by 1 without
scale_attn_weights), the lm head tied to wte.

GPT-2 keeps its linear weights as Conv1D, [in, out], transposed here at load; GPT-BigCode's are nn.Linear.  GPT-BigCode
with multi_query has one K/V head (c_attn: all q rows, then k's and v's); without it each head's q, k and v rows
lie together (split_qkv's per_head).  Checkpoints saved from the bare model name their tensors without "transformer.".
Notation as in llama.py.
"""

import torch

from .gpt_layers import GptForCausalLM


class GPT2LMHeadModel(GptForCausalLM):
    """GptForCausalLM's contract with GPT-2's names."""

    PREFIX = "transformer."
    NAMES = ((r"wte\.", "model.embed_tokens."), (r"wpe\.", "model.embed_positions."), (r"ln_f\.", "model.norm."),
             (r"h\.(\d+)\.ln_1\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.ln_2\.", r"model.layers.\1.post_attention_layernorm."),
             (r"h\.(\d+)\.attn\.c_attn\.", r"model.layers.\1.self_attn.qkv."),
             (r"h\.(\d+)\.attn\.c_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.c_", r"model.layers.\1.mlp.c_"))
    SKIPPED = r"h\.\d+\.attn\.(bias|masked_bias)"   # the causal masks older checkpoints saved
    CONV1D = True          # linear weights stored [in, out]

    def convert(self, name: str, tensor: torch.Tensor) -> list:
        if self.CONV1D and tensor.dim() == 2 and ".layers." in name:
            tensor = tensor.t()  # [out, in]
        return super().convert(name, tensor)


class GPTBigCodeForCausalLM(GPT2LMHeadModel):
    """GPT-2's names with nn.Linear weights; without multi_query, c_attn's rows grouped per head."""

    CONV1D = False

    @property
    def PER_HEAD_QKV(self) -> bool:
        return self.config.num_kv_heads == self.config.num_heads


class GPTNeoForCausalLM(GPT2LMHeadModel):
    """GPT-2's layer under GPT-Neo's names (nn.Linear weights, q/k/v without biases); local layers windowed
    (config.layer_windows), scores not scaled (config.attention_multiplier 1)."""

    CONV1D = False
    NAMES = ((r"wte\.", "model.embed_tokens."), (r"wpe\.", "model.embed_positions."), (r"ln_f\.", "model.norm."),
             (r"h\.(\d+)\.ln_1\.", r"model.layers.\1.input_layernorm."),
             (r"h\.(\d+)\.ln_2\.", r"model.layers.\1.post_attention_layernorm."),
             (r"h\.(\d+)\.attn\.attention\.([qkv])_proj\.", r"model.layers.\1.self_attn.\2_proj."),
             (r"h\.(\d+)\.attn\.attention\.out_proj\.", r"model.layers.\1.self_attn.o_proj."),
             (r"h\.(\d+)\.mlp\.c_", r"model.layers.\1.mlp.c_"))
    SKIPPED = r"h\.\d+\.attn\.attention\.(bias|masked_bias)"
