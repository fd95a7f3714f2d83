"""GIT's text decoder (HF GitForCausalLM without pixel_values) and XLM's causal LMs (HF XLMWithLMHeadModel, causal=True)
served as causal LMs (fields: encdec_config.py) on the BERT-like decoder (bert_decoder.py): word + position embeddings
and their LayerNorm, post-norm layers with biases everywhere, an lm head with its bias and no head transform.
Notation as in llama.py: P positions, H hidden.
"""

import torch

from .bert_decoder import BertDecoderForCausalLM

_XLM_LAYER = r"attentions\.(\d+)\."


def xlm_positions(rows: int, dim: int) -> torch.Tensor:
    """[rows, dim] float32: HF XLM's fixed table, computed in float64 as its numpy one: column j of position p is
    sin (even j) or cos (odd j) of p / 10000 ** (2 * (j // 2) / dim)."""
    cols = torch.arange(dim, dtype=torch.float64)  # [dim]
    angles = torch.arange(rows, dtype=torch.float64).unsqueeze(1) / torch.pow(10000.0, 2 * (cols // 2) / dim)
    table = torch.empty(rows, dim, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])
    return table.float()  # [P, H]


class GitDecoderForCausalLM(BertDecoderForCausalLM):
    """BERT's decoder with GIT's names: `git.` before the text model, the lm head `output`; no token types, no head
    transform; the image encoder, its projection and temporal embeddings are read and dropped."""

    SKIPPED = BertDecoderForCausalLM.SKIPPED + r"|(image_encoder|visual_projection|img_temporal_embedding)\..*"

    def rename(self, name: str, tensor: torch.Tensor) -> list:
        if name.startswith("output."):
            return [("lm_head." + name.removeprefix("output."), tensor)]
        return super().rename(name.removeprefix("git."), tensor)


class XlmForCausalLM(BertDecoderForCausalLM):
    """BERT's decoder with XLM's names (layer_norm1 after attention, layer_norm2 after the MLP) and its pred_layer."""

    NAMES = ((_XLM_LAYER + r"q_lin\.", r"model.layers.\1.self_attn.q_proj."),
             (_XLM_LAYER + r"k_lin\.", r"model.layers.\1.self_attn.k_proj."),
             (_XLM_LAYER + r"v_lin\.", r"model.layers.\1.self_attn.v_proj."),
             (_XLM_LAYER + r"out_lin\.", r"model.layers.\1.self_attn.o_proj."),
             (r"ffns\.(\d+)\.lin1\.", r"model.layers.\1.mlp.c_fc."),
             (r"ffns\.(\d+)\.lin2\.", r"model.layers.\1.mlp.c_proj."),
             (r"layer_norm1\.(\d+)\.", r"model.layers.\1.input_layernorm."),
             (r"layer_norm2\.(\d+)\.", r"model.layers.\1.post_attention_layernorm."),
             (r"embeddings\.", "model.embed_tokens."), (r"position_embeddings\.", "model.embed_positions."),
             (r"layer_norm_emb\.", "model.embed_norm."))
    SKIPPED = r"position_ids|lang_embeddings\..*"   # HF's buffer; no langs in a plain input_ids call

    def rename(self, name: str, tensor: torch.Tensor) -> list:
        if name.startswith("pred_layer.proj."):
            return [("lm_head." + name.removeprefix("pred_layer.proj."), tensor)]
        return super().rename(name.removeprefix("transformer."), tensor)

    def position_table(self) -> torch.Tensor:
        return xlm_positions(*self.embed_positions.shape)  # [P, H]
