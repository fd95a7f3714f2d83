"""The Hugging Face config fields of the BERT-like decoders (is_decoder=True: causal self-attention, no encoder states)
served as causal LMs (bert_decoder.py), as ModelConfig fields (family_config.py's contract), on
decoder_config.DecoderLayout.  No torch here.

Each: word + position + token type 0 embeddings, a LayerNorm on them (not MegatronBERT's, XLM-RoBERTa-XL's), post-norm
layers (pre-norm with a final norm: MegatronBERT, XLM-RoBERTa-XL, RoBERTa-PreLayerNorm), biases everywhere, and the
MLM head's dense -> act -> LayerNorm before the lm head with its bias (BertGeneration: the lm head alone).  RoBERTa's
kin (RoBERTa, XLM-RoBERTa, CamemBERT, Data2VecText, XLM-RoBERTa-XL, RoBERTa-PreLayerNorm, X-MOD) count positions
from pad_token_id + 1 and give a pad token the row pad_token_id; their heads' act is the exact gelu, as ELECTRA's.
ELECTRA's embeddings are embedding_size wide (projected to hidden; its head back to that width), RemBERT's
input_embedding_size (projected) with a head of output_embedding_size and an lm head of its own; BigBird's token
embeddings times sqrt(hidden) where rescale_embeddings, its q/k/v biases by use_bias.  RoFormer: no learned positions
but q and k rotating in interleaved pairs by its sinusoidal table (roformer.py), embedding_size-wide embeddings and head
as ELECTRA's.  RoCBERT: each token's embedding concatenated with row 0 (HF's default ids) of its shape and
pronunciation tables, mapped back to hidden (concat_input).
X-MOD: RoBERTa's with the default language's adapter after each MLP block (xmod.py).
"""

from typing import Any, Dict

from .decoder_config import DecoderLayout, activation
from .gpt_config import GptLayout

ROBERTA_KIN = ("RobertaForCausalLM", "XLMRobertaForCausalLM", "CamembertForCausalLM", "Data2VecTextForCausalLM",
               "XLMRobertaXLForCausalLM", "RobertaPreLayerNormForCausalLM", "XmodForCausalLM")
PRE_NORM = ("MegatronBertForCausalLM", "XLMRobertaXLForCausalLM", "RobertaPreLayerNormForCausalLM")
NO_EMBED_NORM = ("MegatronBertForCausalLM", "XLMRobertaXLForCausalLM")
EXACT_GELU_HEADS = ROBERTA_KIN + ("ElectraForCausalLM",)   # their heads' act: the exact gelu, whatever hidden_act says
BERT_LIKE_MODEL_TYPES = {"bert": "BertLMHeadModel", "roberta": "RobertaForCausalLM",
                         "xlm-roberta": "XLMRobertaForCausalLM", "camembert": "CamembertForCausalLM",
                         "data2vec-text": "Data2VecTextForCausalLM", "electra": "ElectraForCausalLM",
                         "ernie": "ErnieForCausalLM", "rembert": "RemBertForCausalLM",
                         "megatron-bert": "MegatronBertForCausalLM", "xlm-roberta-xl": "XLMRobertaXLForCausalLM",
                         "roberta-prelayernorm": "RobertaPreLayerNormForCausalLM",
                         "bert-generation": "BertGenerationDecoder", "big_bird": "BigBirdForCausalLM",
                         "roformer": "RoFormerForCausalLM", "roc_bert": "RoCBertForCausalLM",
                         "xmod": "XmodForCausalLM"}


def roberta_offset(arch: str, hf_config) -> int:
    """The row of position 0: pad_token_id + 1 for RoBERTa's kin, else 0."""
    return int(hf_config.pad_token_id) + 1 if arch in ROBERTA_KIN else 0


def bert_view(arch: str, hf_config):
    """hf_config as ModelConfig.from_hf reads it: the context RoBERTa's kin reach past their offset; RemBERT's lm head
    its own (HF ties none)."""
    from .mamba_stack_config import FieldsView

    fields = {"max_position_embeddings": int(hf_config.max_position_embeddings) - roberta_offset(arch, hf_config)}
    if arch == "RemBertForCausalLM":
        fields["tie_word_embeddings"] = False
    return FieldsView(hf_config, fields)


def _refuse(arch: str, hf_config) -> None:
    if not getattr(hf_config, "is_decoder", False):
        raise ValueError(f"{arch}: is_decoder=False runs bidirectional self-attention (an encoder), not a causal LM")
    if getattr(hf_config, "add_cross_attention", False):
        raise ValueError(f"{arch}: add_cross_attention=True (an encoder-decoder) is not supported")
    if getattr(hf_config, "use_task_id", False):
        raise ValueError(f"{arch}: use_task_id=True (ERNIE's task type embeddings) is not supported")
    kind = getattr(hf_config, "position_embedding_type", None) or "absolute"
    if kind != "absolute":
        raise ValueError(f"{arch}: position_embedding_type={kind!r} is not supported; only 'absolute' is")
    if arch in ROBERTA_KIN and hf_config.pad_token_id is None:
        raise ValueError(f"{arch}: positions counted from pad_token_id need one")


def _glyphs(arch: str, hf_config) -> tuple:
    """RoCBERT's (name, rows, width) of the shape and pronunciation tables it concatenates (concat_input), in that
    order; None where it concatenates nothing and has no map_inputs_layer."""
    if arch != "RoCBertForCausalLM" or not getattr(hf_config, "concat_input", True):
        return None
    tables = (("shape_embed", "enable_shape", "shape_vocab_size", "shape_embed_dim"),
              ("pronunciation_embed", "enable_pronunciation", "pronunciation_vocab_size", "pronunciation_embed_dim"))
    return tuple((name, int(getattr(hf_config, rows)), int(getattr(hf_config, dim)))
                 for name, on, rows, dim in tables if getattr(hf_config, on, True))


def _xmod_adapter(arch: str, hf_config):
    """X-MOD's (default language, bottleneck width, ln_before_adapter); None for the others."""
    if arch != "XmodForCausalLM":
        return None
    language = getattr(hf_config, "default_language", None)
    if language is None or str(language) not in [str(lang) for lang in hf_config.languages]:
        raise ValueError(f"{arch}: default_language {language!r} must name one of languages {hf_config.languages} "
                         "(HF runs no language without it)")
    if hf_config.pre_norm or hf_config.adapter_layer_norm or not hf_config.adapter_reuse_layer_norm:
        raise ValueError(f"{arch}: only pre_norm=False, adapter_layer_norm=False, adapter_reuse_layer_norm=True "
                         "(the released models') are supported")
    return str(language), int(hf_config.hidden_size // hf_config.adapter_reduction_factor), \
        bool(hf_config.ln_before_adapter)


def _bert_like(arch: str, hf_config) -> Dict[str, Any]:
    _refuse(arch, hf_config)
    n, hidden = int(hf_config.num_hidden_layers), int(hf_config.hidden_size)
    act = activation(arch, hf_config.hidden_act, "hidden_act")
    if getattr(hf_config, "rotary_value", False):
        raise ValueError(f"{arch}: rotary_value=True (values rotated too) is not supported")
    roformer = arch == "RoFormerForCausalLM"
    embed = {"ElectraForCausalLM": getattr(hf_config, "embedding_size", None),
             "RoFormerForCausalLM": getattr(hf_config, "embedding_size", None),
             "RemBertForCausalLM": getattr(hf_config, "input_embedding_size", None)}.get(arch)
    head = {"ElectraForCausalLM": embed, "RoFormerForCausalLM": embed,
            "RemBertForCausalLM": getattr(hf_config, "output_embedding_size", None)}.get(arch)
    layout = DecoderLayout(embed_norm="" if arch in NO_EMBED_NORM else "after_positions", final_norm=arch in PRE_NORM,
                           pad_row=int(hf_config.pad_token_id) if arch in ROBERTA_KIN else None,
                           type_rows=0 if arch == "BertGenerationDecoder" else int(hf_config.type_vocab_size),
                           head_transform=arch != "BertGenerationDecoder",
                           head_width=None if not head or int(head) == hidden else int(head),
                           embed_width=None if not embed or int(embed) == hidden else int(embed),
                           head_act="gelu" if arch in EXACT_GELU_HEADS else act,
                           glyph_embeds=_glyphs(arch, hf_config), xmod_adapter=_xmod_adapter(arch, hf_config))
    scale = hidden ** 0.5 if getattr(hf_config, "rescale_embeddings", False) else 1.0
    offset = roberta_offset(arch, hf_config)
    positions = 0 if roformer else int(hf_config.max_position_embeddings)   # RoFormer: rotary (roformer.py)
    return dict(nope_layers=() if roformer else tuple(range(n)),
                rope_params={"rope_type": "default", "rope_theta": 1e4},
                gpt=GptLayout(positions=positions, position_offset=offset, post_norm=arch not in PRE_NORM),
                decoder=layout, hidden_act=act, intermediate_size=int(hf_config.intermediate_size),
                rms_norm_eps=float(hf_config.layer_norm_eps), attention_bias=bool(getattr(hf_config, "use_bias", True)),
                o_proj_bias=True, mlp_bias=True,
                embedding_multiplier=scale)


BERT_LIKE_FIELDS = {arch: _bert_like for arch in BERT_LIKE_MODEL_TYPES.values()}
