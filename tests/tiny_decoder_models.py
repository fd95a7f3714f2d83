"""Tiny HF configs of the decoders of encoder-decoder families served as causal LMs (tiny_models.py builds and saves
them): 2 layers, hidden 32, 4 heads, an MLP of 64, 64 positions.  BART-like: embeddings scaled, their learned or
sinusoidal positions, pre- or post-norm and embedding norms as their classes have them, Marian's swish,
Blenderbot-Small's relu; TrOCR also with fairseq's sinusoids.  BERT-like (is_decoder): ELECTRA's, RoFormer's and
RemBERT's narrower embeddings (24) and RemBERT's wider head (40), BigBird's rescaled embeddings without q/k/v biases,
three token types in XLM-RoBERTa-XL, X-MOD's second language as the default, RoCBERT's glyph tables concatenated or
not; RoBERTa's kin count positions from their pad id 5, absent from the test prompts (HF counts a prompt's positions
past its pad tokens)."""

_BART_CONFIGS = {"bart": "BartConfig", "mbart": "MBartConfig", "plbart": "PLBartConfig", "mvp": "MvpConfig",
                 "blenderbot": "BlenderbotConfig", "blenderbot_small": "BlenderbotSmallConfig",
                 "pegasus": "PegasusConfig", "marian": "MarianConfig", "trocr": "TrOCRConfig",
                 "trocr_sinusoidal": "TrOCRConfig", "bigbird_pegasus": "BigBirdPegasusConfig"}
_BART_ARCHS = {"bart": "BartForCausalLM", "mbart": "MBartForCausalLM", "plbart": "PLBartForCausalLM",
               "mvp": "MvpForCausalLM", "blenderbot": "BlenderbotForCausalLM",
               "blenderbot_small": "BlenderbotSmallForCausalLM", "pegasus": "PegasusForCausalLM",
               "marian": "MarianForCausalLM", "trocr": "TrOCRForCausalLM", "trocr_sinusoidal": "TrOCRForCausalLM",
               "bigbird_pegasus": "BigBirdPegasusForCausalLM"}

_BERT_CONFIGS = {"bert": ("BertConfig", "BertLMHeadModel"), "roberta": ("RobertaConfig", "RobertaForCausalLM"),
                 "xlm_roberta": ("XLMRobertaConfig", "XLMRobertaForCausalLM"),
                 "camembert": ("CamembertConfig", "CamembertForCausalLM"),
                 "data2vec_text": ("Data2VecTextConfig", "Data2VecTextForCausalLM"),
                 "electra": ("ElectraConfig", "ElectraForCausalLM"), "ernie": ("ErnieConfig", "ErnieForCausalLM"),
                 "rembert": ("RemBertConfig", "RemBertForCausalLM"),
                 "megatron_bert": ("MegatronBertConfig", "MegatronBertForCausalLM"),
                 "xlm_roberta_xl": ("XLMRobertaXLConfig", "XLMRobertaXLForCausalLM"),
                 "roberta_prelayernorm": ("RobertaPreLayerNormConfig", "RobertaPreLayerNormForCausalLM"),
                 "bert_generation": ("BertGenerationConfig", "BertGenerationDecoder"),
                 "bigbird": ("BigBirdConfig", "BigBirdForCausalLM"),
                 "roformer": ("RoFormerConfig", "RoFormerForCausalLM"),
                 "xmod": ("XmodConfig", "XmodForCausalLM"), "roc_bert": ("RoCBertConfig", "RoCBertForCausalLM"),
                 "roc_bert_plain": ("RoCBertConfig", "RoCBertForCausalLM")}

_ROBERTA_KIN = ("roberta", "xlm_roberta", "camembert", "data2vec_text", "xlm_roberta_xl", "roberta_prelayernorm",
                "xmod")


def decoder_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, decoder_start_token_id=eos,
               forced_eos_token_id=None)   # HF generate's EOS forced at max_length: a generation option we do not run
    if arch in _BART_CONFIGS:
        act = {"marian": "swish", "bigbird_pegasus": "gelu_new", "blenderbot_small": "relu"}.get(arch, "gelu")
        shape = dict(d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
                     max_position_embeddings=64, activation_function=act, scale_embedding=True,
                     architectures=[_BART_ARCHS[arch]], **ids)
        if arch == "trocr_sinusoidal":   # fairseq's sinusoids from pad_token_id + 1, no layernorm_embedding
            shape.update(use_learned_position_embeddings=False, layernorm_embedding=False)
        if not arch.startswith("trocr"):
            # HF sizes its cache by the encoder's layers
            shape.update(encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64)
        if arch == "bigbird_pegasus":
            shape.update(use_bias=True, attention_type="original_full")
        return getattr(transformers, _BART_CONFIGS[arch])(**shape)
    name, architecture = _BERT_CONFIGS[arch]
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64, is_decoder=True, architectures=[architecture], **ids)
    extra = {"electra": dict(embedding_size=24),
             "bigbird": dict(rescale_embeddings=True, hidden_act="gelu_new", use_bias=False),
             "rembert": dict(input_embedding_size=24, output_embedding_size=40, tie_word_embeddings=False),
             "bert": dict(hidden_act="relu"), "roberta": dict(hidden_act="relu"),
             "xlm_roberta_xl": dict(type_vocab_size=3),
             "megatron_bert": dict(hidden_act="gelu_new"), "roformer": dict(embedding_size=24),
             "roc_bert": dict(shape_vocab_size=10, shape_embed_dim=8, pronunciation_vocab_size=12,
                              pronunciation_embed_dim=12),
             "xmod": dict(languages=["en_XX", "de_DE"], default_language="de_DE", adapter_reduction_factor=4),
             "roc_bert_plain": dict(shape_vocab_size=10, concat_input=False, enable_pronunciation=False)}.get(arch, {})
    if arch in _ROBERTA_KIN:
        shape["pad_token_id"] = 5
    return getattr(transformers, name)(**{**shape, **extra})
