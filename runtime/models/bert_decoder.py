"""The BERT-like decoders served as causal LMs (HF BertLMHeadModel, RobertaForCausalLM and its kin, ELECTRA, ERNIE,
RemBERT, MegatronBERT, BertGenerationDecoder, BigBird ...; fields: bert_config.py) on the BART-like decoder
(bart_decoder.py): its post-norm GPT layers (or pre-norm ones with a final norm) and embedding LayerNorm, with BERT's
names, the token type 0 embedding added to every token, RoBERTa's positions (a pad token reads the row pad_token_id),
an embedding projection where the embeddings are narrower than hidden, and the MLM head's dense -> act -> LayerNorm
before the lm head with its bias.  Notation as in llama.py: T tokens, H hidden, V vocab, E embedding width, W the head
transform's width.
"""

from typing import Optional

import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .bart_decoder import BartDecoderForCausalLM
from .gpt_layers import ACTIVATIONS, GptForCausalLM, rename_with
from .layernorm_model import LayerNorm
from .layers import param
from .packed_linear import linear

_LAYER = r"encoder\.layer\.(\d+)\."
LAYER_NAMES = ((_LAYER + r"attention\.self\.query\.", r"model.layers.\1.self_attn.q_proj."),
               (_LAYER + r"attention\.self\.key\.", r"model.layers.\1.self_attn.k_proj."),
               (_LAYER + r"attention\.self\.value\.", r"model.layers.\1.self_attn.v_proj."),
               (_LAYER + r"attention\.output\.dense\.", r"model.layers.\1.self_attn.o_proj."),
               (_LAYER + r"intermediate\.dense\.", r"model.layers.\1.mlp.c_fc."),
               (_LAYER + r"output\.dense\.", r"model.layers.\1.mlp.c_proj."),
               # post-norm: after attention, after the MLP
               (_LAYER + r"attention\.output\.LayerNorm\.", r"model.layers.\1.input_layernorm."),
               (_LAYER + r"output\.LayerNorm\.", r"model.layers.\1.post_attention_layernorm."),
               # pre-norm: MegatronBERT's, XLM-RoBERTa-XL's, RoBERTa-PreLayerNorm's before attention and the MLP
               (_LAYER + r"attention\.(ln|self_attn_layer_norm|LayerNorm)\.", r"model.layers.\1.input_layernorm."),
               (_LAYER + r"(ln|LayerNorm|intermediate\.LayerNorm)\.", r"model.layers.\1.post_attention_layernorm."),
               (r"encoder\.(ln|LayerNorm)\.", "model.norm."), (r"LayerNorm\.", "model.norm."),
               (r"embeddings\.word_embeddings\.", "model.embed_tokens."),
               (r"embeddings\.position_embeddings\.", "model.embed_positions."),
               (r"embeddings\.token_type_embeddings\.", "model.type_embed."),
               (r"embeddings\.LayerNorm\.", "model.embed_norm."),
               (r"(embeddings_project|encoder\.embedding_hidden_mapping_in)\.", "model.embed_project."))
# the heads, by their full names: BERT's cls.predictions (RemBERT's without "transform."), RoBERTa's lm_head, ELECTRA's
HEAD_NAMES = ((r"cls\.predictions\.(transform\.)?dense\.", "model.head_dense."),
              (r"cls\.predictions\.(transform\.)?LayerNorm\.", "model.head_norm."),
              (r"lm_head\.dense\.", "model.head_dense."), (r"lm_head\.layer_norm\.", "model.head_norm."),
              (r"generator_predictions\.dense\.", "model.head_dense."),
              (r"generator_predictions\.LayerNorm\.", "model.head_norm."),
              (r"(cls\.predictions|lm_head)\.bias$", "lm_head.bias"),
              (r"(cls\.predictions\.decoder|lm_head\.decoder|generator_lm_head)\.", "lm_head."))


class BertDecoderForCausalLM(BartDecoderForCausalLM):
    """The BART-like decoder with BERT's names, embeddings and MLM head."""

    LM_HEAD_BIAS = True
    NAMES = LAYER_NAMES
    SKIPPED = r"pooler\..*|embeddings\.(position_ids|token_type_ids)"   # BigBird's unused pooler, HF's buffers
    PREFIXES = ("bert.", "roberta.", "data2vec_text.", "electra.", "ernie.", "rembert.", "roberta_prelayernorm.",
                "roformer.", "roc_bert.")

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, V, layout = config.hidden_size, config.vocab_size, config.decoder
        E, W = layout.embed_width or H, layout.head_width or H
        eps = config.rms_norm_eps
        if layout.embed_width:   # the embeddings E wide, projected to the residual stream
            self.embed_tokens = param(V, E, dtype=dtype, device=device)  # [V, E]
            self.embed_positions = (param(config.gpt.positions, E, dtype=dtype, device=device)
                                    if config.gpt.positions else None)  # [P, E]
            self.embed_norm = LayerNorm(E, eps, dtype, device) if self.embed_norm is not None else None
        self.embed_project = (param(H, E, dtype=dtype, device=device), param(H, dtype=dtype, device=device)) \
            if layout.embed_width else None  # [H, E], [H]
        self.type_embed = param(layout.type_rows, E, dtype=dtype, device=device) if layout.type_rows else None
        self.head_dense = (param(W, H, dtype=dtype, device=device), param(W, dtype=dtype, device=device)) \
            if layout.head_transform else None  # [W, H], [W]
        self.head_norm = LayerNorm(W, eps, dtype, device) if layout.head_transform else None
        if config.tie_word_embeddings:
            self.lm_head = self.embed_tokens  # [V, E]: the head's width is the embeddings'
        elif layout.head_width or layout.embed_width:
            self.lm_head = param(V, W, dtype=dtype, device=device)  # [V, W]
        self.head_act = ACTIVATIONS.get(layout.head_act)

    def rename(self, name: str, tensor: torch.Tensor) -> list:
        ours = rename_with(HEAD_NAMES, name)
        if ours is not None:
            return [(ours, tensor)]
        prefix = next((p for p in self.PREFIXES if name.startswith(p)), "")
        return super().rename(name.removeprefix(prefix), tensor)

    def embed_inputs(self, fb: ForwardBatch) -> torch.Tensor:
        """(scaled) token + type 0 + position embeddings, their LayerNorm, the projection to hidden: [T, H]."""
        x = self.token_embeddings(fb)  # [T, E]
        if self.embed_positions is not None:
            x = x + self.position_embeddings(fb)
        if self.type_embed is not None:
            x = x + self.type_embedding()
        if self.embed_norm is not None:
            x = self.norm_embeddings(x)
        return x if self.embed_project is None else linear(x, *self.embed_project, self.gemm_rows)  # [T, H]

    def token_embeddings(self, fb: ForwardBatch) -> torch.Tensor:
        return super(GptForCausalLM, self).embed_inputs(fb)  # [T, E], times the embedding scale

    def type_embedding(self) -> torch.Tensor:
        return self.type_embed[0]  # [E]: token type 0's row, every token's

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> the head transform [N, W] -> logits [N, V] float32 with the lm head's bias."""
        return super().compute_logits(self.transform_head(hidden))  # [N, V]

    def transform_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The MLM head's dense -> act -> LayerNorm: [N, H] -> [N, W] (BertGeneration: none)."""
        if self.head_dense is None:
            return hidden
        return self.head_norm(self.head_act(linear(hidden, *self.head_dense, self.gemm_rows)))  # [N, W]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        if self.embed_project is not None:
            t["model.embed_project.weight"], t["model.embed_project.bias"] = [(p, False) for p in self.embed_project]
        if self.type_embed is not None:
            t["model.type_embed.weight"] = (self.type_embed, False)
        if self.head_dense is not None:
            t["model.head_dense.weight"], t["model.head_dense.bias"] = [(p, False) for p in self.head_dense]
            t.update(self.head_norm.targets("model.head_norm"))
        return t


class RoCBertDecoderForCausalLM(BertDecoderForCausalLM):
    """BERT's decoder whose token embeddings are map_inputs_layer's of [word; shape row 0; pronunciation row 0] (HF's
    default shape and pronunciation ids); the tables it does not concatenate are read and dropped."""

    NAMES = ((r"embeddings\.(shape_embed|pronunciation_embed)\.", r"model.\1."),
             (r"embeddings\.map_inputs_layer\.", "model.input_map."), *LAYER_NAMES)

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(config, attn_backend, dtype=dtype, device=device, max_context=max_context)
        H, glyphs = config.hidden_size, config.decoder.glyph_embeds
        self.glyphs = {name: param(rows, dim, dtype=dtype, device=device) for name, rows, dim in glyphs or ()}
        width = H + sum(table.shape[1] for table in self.glyphs.values())
        self.input_map = None if glyphs is None else (param(H, width, dtype=dtype, device=device),
                                                      param(H, dtype=dtype, device=device))  # [H, H + glyphs], [H]
        unused = {"shape_embed", "pronunciation_embed"} - set(self.glyphs)
        self.SKIPPED = "|".join([BertDecoderForCausalLM.SKIPPED, *(rf"embeddings\.{n}\..*" for n in unused)])

    def token_embeddings(self, fb: ForwardBatch) -> torch.Tensor:
        """map_inputs_layer of each token's embedding beside the glyph tables' row 0: [T, H]."""
        x = super().token_embeddings(fb)  # [T, H]
        if self.input_map is None:
            return x
        return linear(torch.cat([x, *self.glyph_rows(x.shape[0])], dim=-1), *self.input_map, self.gemm_rows)  # [T, H]

    def glyph_rows(self, T: int) -> list:
        return [table[0].expand(T, -1) for table in self.glyphs.values()]  # [T, dim] each

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        t.update({f"model.{name}.weight": (table, False) for name, table in self.glyphs.items()})
        if self.input_map is not None:
            t["model.input_map.weight"], t["model.input_map.bias"] = [(p, False) for p in self.input_map]
        return t
