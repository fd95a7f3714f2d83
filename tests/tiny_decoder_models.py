"""Tiny HF configs of the decoders of encoder-decoder families served as causal LMs (tiny_models.py builds and saves
them): 2 layers, hidden 32, 4 heads, an MLP of 64; the embedding scale on where the family's configs take one; the
BART-like decoders' learned or sinusoidal positions, pre- or post-norm and embedding norms as their classes have them."""

_BART_CONFIGS = {"bart": "BartConfig", "mbart": "MBartConfig", "plbart": "PLBartConfig", "mvp": "MvpConfig",
                 "blenderbot": "BlenderbotConfig", "blenderbot_small": "BlenderbotSmallConfig",
                 "pegasus": "PegasusConfig", "marian": "MarianConfig", "trocr": "TrOCRConfig",
                 "bigbird_pegasus": "BigBirdPegasusConfig"}
_BART_ARCHS = {"bart": "BartForCausalLM", "mbart": "MBartForCausalLM", "plbart": "PLBartForCausalLM",
               "mvp": "MvpForCausalLM", "blenderbot": "BlenderbotForCausalLM",
               "blenderbot_small": "BlenderbotSmallForCausalLM", "pegasus": "PegasusForCausalLM",
               "marian": "MarianForCausalLM", "trocr": "TrOCRForCausalLM",
               "bigbird_pegasus": "BigBirdPegasusForCausalLM"}


def decoder_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, decoder_start_token_id=eos,
               forced_eos_token_id=None)   # HF generate's EOS forced at max_length: a generation option we do not run
    if arch in _BART_CONFIGS:
        act = {"marian": "swish", "bigbird_pegasus": "gelu_new", "blenderbot_small": "relu"}.get(arch, "gelu")
        shape = dict(d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64,
                     max_position_embeddings=64, activation_function=act, scale_embedding=True,
                     architectures=[_BART_ARCHS[arch]], **ids)
        if arch != "trocr":
            shape.update(encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64)   # HF sizes its cache by these
        if arch == "bigbird_pegasus":
            shape.update(use_bias=True, attention_type="original_full")
        return getattr(transformers, _BART_CONFIGS[arch])(**shape)
    raise ValueError(arch)
