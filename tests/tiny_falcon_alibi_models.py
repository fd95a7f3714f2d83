"""The tiny HF config of Falcon-RW (falcon-rw-1b's layout: alibi, neither new_decoder_architecture nor multi_query,
sequential layers, biases, each head's q/k/v rows together); tiny_models.py builds and saves it.  12 heads of 16: the
slopes of the 4 heads past 8 (2 ** -0.5, 2 ** -1.5, ...) are not powers of two, so HF's bfloat16 product with the
key position rounds from the first positions on; 512 positions, so positions past 256 (rounded to even in bfloat16)
are served too."""


def falcon_alibi_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    if arch != "falcon_rw":
        raise ValueError(f"unknown tiny arch {arch!r}; choose falcon_rw")
    return transformers.FalconConfig(num_hidden_layers=2, hidden_size=192, num_attention_heads=12,
                                     ffn_hidden_size=256, alibi=True, bias=True, multi_query=False,
                                     new_decoder_architecture=False, parallel_attn=False,
                                     max_position_embeddings=512, vocab_size=vocab, eos_token_id=eos,
                                     pad_token_id=pad, bos_token_id=None)
