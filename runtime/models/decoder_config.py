"""The Hugging Face config fields of the decoders of encoder-decoder families served as plain causal LMs (their
...ForCausalLM classes run without encoder states, so cross-attention is skipped and holds no KV), as ModelConfig
fields (family_config.py's contract), and DecoderLayout, what they add to gpt_config.GptLayout.  No torch here.

BART-like (bart_decoder.py): BART, PLBART, MVP (post-norm, learned positions at offset 2, layernorm_embedding after the
positions), mBART (pre-norm, then a final layer_norm), Blenderbot (pre-norm, positions at offset 0, no
layernorm_embedding), Blenderbot-Small (post-norm, layernorm_embedding on the unscaled token embeddings before the
positions), Pegasus (pre-norm, sinusoidal positions), Marian (post-norm, sinusoidal positions), TrOCR (post-norm,
learned positions at offset 2 or fairseq's sinusoids from pad_token_id + 1, layernorm_embedding where set),
BigBird-Pegasus (pre-norm, its layernorm_embedding as the final norm, q/k/v/o biases by use_bias, an lm head of its
own).  Token embeddings times sqrt(d_model) where scale_embedding; every norm nn.LayerNorm's eps 1e-5.
The BERT-like decoders' fields: bert_config.py.
"""

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .gpt_config import GptLayout, _activation

LAYER_NORM_EPS = 1e-5   # nn.LayerNorm's default, which these decoders' norms keep
_SILU = ("swish", "silu")   # Marian's; the GPT MLP runs it as "silu" (gpt_layers.ACTIVATIONS)


def activation(arch: str, name, field: str) -> str:
    """gpt_config's activations, and swish / silu."""
    return "silu" if name in _SILU else _activation(arch, name, field)


@dataclass(frozen=True)
class DecoderLayout:
    """embed_norm: a LayerNorm on the embeddings, "after_positions" (of tokens + positions), "before_positions" (of the
    token embeddings alone) or "" (none); sinusoidal: a fixed position table, "pegasus" (Pegasus's sinusoids unless
    the checkpoint holds a table) or "fairseq" (XGLM's, the row pad_row zero: TrOCR's), else "" (learned);
    final_norm: a LayerNorm after the last layer; pad_row: RoBERTa's positions, where the token pad_row reads the
    table's row pad_row (else the row of position p is p + offset); type_rows: BERT's token type embeddings (0: none),
    their type 0 row added to every token; head_transform: BERT's dense -> act -> LayerNorm before the lm head;
    head_width: that transform's output width where it differs from hidden (RemBERT's output_embedding_size);
    embed_width: the embeddings' width where they are projected to hidden (ELECTRA, RemBERT); head_act: the head
    transform's activation (gpt_layers.ACTIVATIONS); glyph_embeds: RoCBERT's (name, rows, width) of its shape and/or
    pronunciation tables whose row 0 is concatenated to each token's embedding before map_inputs_layer (None: no
    map_inputs_layer, the tables unused); xmod_adapter: X-MOD's (default language, bottleneck width,
    ln_before_adapter)."""

    embed_norm: str = ""
    sinusoidal: str = ""
    final_norm: bool = False
    pad_row: Optional[int] = None
    type_rows: int = 0
    head_transform: bool = False
    head_width: Optional[int] = None
    embed_width: Optional[int] = None
    head_act: str = ""
    glyph_embeds: Optional[tuple] = None
    xmod_adapter: Optional[tuple] = None


# per architecture: (post-norm layers, position offset, sinusoidal, embed_norm, final norm)
_BART_LIKE = {
    "BartForCausalLM": (True, 2, "", "after_positions", False),
    "PLBartForCausalLM": (True, 2, "", "after_positions", False),
    "MvpForCausalLM": (True, 2, "", "after_positions", False),
    "MBartForCausalLM": (False, 2, "", "after_positions", True),
    "BlenderbotForCausalLM": (False, 0, "", "", True),
    "BlenderbotSmallForCausalLM": (True, 0, "", "before_positions", False),
    "PegasusForCausalLM": (False, 0, "pegasus", "", True),
    "MarianForCausalLM": (True, 0, "pegasus", "", False),
    "TrOCRForCausalLM": (True, 2, "", "after_positions", False),
    "BigBirdPegasusForCausalLM": (False, 0, "", "", True),
}


def decoder_view(arch: str, hf_config):
    """hf_config as ModelConfig.from_hf reads it: the decoder's heads (their attribute_map names the encoder's); an
    lm head of its own in BigBirdPegasusForCausalLM, which ties none whatever tie_word_embeddings says."""
    from .mamba_stack_config import FieldsView

    fields = {"num_attention_heads": int(hf_config.decoder_attention_heads)}
    if arch == "BigBirdPegasusForCausalLM":
        fields["tie_word_embeddings"] = False
    return FieldsView(hf_config, fields)


def _bart_like(arch: str, hf_config) -> Dict[str, Any]:
    post_norm, offset, sinusoidal, embed_norm, final_norm = _BART_LIKE[arch]
    n = int(hf_config.decoder_layers)
    scale = math.sqrt(hf_config.d_model) if getattr(hf_config, "scale_embedding", False) else 1.0
    if arch == "MvpForCausalLM" and getattr(hf_config, "use_prompt", False):
        raise ValueError(f"{arch}: use_prompt=True (prompt tuning's extra keys and values) is not supported")
    if arch == "MarianForCausalLM" and (getattr(hf_config, "decoder_vocab_size", None) or hf_config.vocab_size) != \
            hf_config.vocab_size:
        raise ValueError(f"{arch}: decoder_vocab_size {hf_config.decoder_vocab_size} differs from vocab_size "
                         f"{hf_config.vocab_size}; only equal sizes are supported")
    pad_row = None
    if arch == "TrOCRForCausalLM":
        if not getattr(hf_config, "use_learned_position_embeddings", True):   # fairseq's, counted from pad + 1
            if hf_config.pad_token_id is None:
                raise ValueError(f"{arch}: sinusoidal positions counted from pad_token_id need one")
            pad_row = int(hf_config.pad_token_id)
            sinusoidal, offset = "fairseq", pad_row + 1
        embed_norm = embed_norm if getattr(hf_config, "layernorm_embedding", True) else ""
    if arch == "BlenderbotSmallForCausalLM":   # its decoder leaves the token embeddings unscaled
        scale = 1.0
    bias = bool(getattr(hf_config, "use_bias", True)) if arch == "BigBirdPegasusForCausalLM" else True
    return dict(nope_layers=tuple(range(n)), num_layers=n,
                gpt=GptLayout(positions=int(hf_config.max_position_embeddings) + offset, position_offset=offset,
                              post_norm=post_norm),
                decoder=DecoderLayout(embed_norm=embed_norm, sinusoidal=sinusoidal, final_norm=final_norm,
                                      pad_row=pad_row),
                hidden_act=activation(arch, hf_config.activation_function, "activation_function"),
                intermediate_size=int(hf_config.decoder_ffn_dim), rms_norm_eps=LAYER_NORM_EPS,
                attention_bias=bias, o_proj_bias=bias, mlp_bias=True, embedding_multiplier=scale)


BART_LIKE_FIELDS = {arch: _bart_like for arch in _BART_LIKE}
BART_LIKE_MODEL_TYPES = {"bart": "BartForCausalLM", "plbart": "PLBartForCausalLM", "mvp": "MvpForCausalLM",
                         "mbart": "MBartForCausalLM", "blenderbot": "BlenderbotForCausalLM",
                         "blenderbot-small": "BlenderbotSmallForCausalLM", "pegasus": "PegasusForCausalLM",
                         "marian": "MarianForCausalLM", "trocr": "TrOCRForCausalLM",
                         "bigbird_pegasus": "BigBirdPegasusForCausalLM"}
