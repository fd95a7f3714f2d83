"""Tiny HF configs of BLOOM, MPT, GPT-1, BioGPT and CTRL (tiny_models.py builds and saves them).  BLOOM and MPT have
6 heads (a head count that is not a power of two: both families' slopes for the extra heads are their own) so that
ALiBi's slopes, from 1/2 to 1/256, bind on the test prompts (26 tokens); MPT's clip_qkv (0.5) and softmax_scale (0.5)
both bind too.  GPT-1's post-norms, BioGPT's and CTRL's embedding scales, CTRL's sinusoids and GPT-NeoX-Japanese's
last-layer bias and partial rope bind by themselves."""


def alibi_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if arch == "bloom":  # 6 heads of 8, word-embedding LayerNorm, biases everywhere, tied
        return transformers.BloomConfig(n_layer=2, hidden_size=48, n_head=6, layer_norm_epsilon=1e-5, **ids)
    if arch == "mpt":  # 6 heads of 8, qkv clamped at 0.5, scores scaled by 0.5, 64 positions, tied
        return transformers.MptConfig(n_layers=2, d_model=48, n_heads=6, max_seq_len=64, layer_norm_epsilon=1e-5,
                                      attn_config={"clip_qkv": 0.5, "softmax_scale": 0.5}, **ids)
    if arch == "openai_gpt":  # 64 learned positions, post-norms, gelu_new, tied
        return transformers.OpenAIGPTConfig(n_layer=2, n_embd=64, n_head=4, n_positions=64, afn="gelu", **ids)
    if arch == "biogpt":  # 64 learned positions at offset 2, embeddings x 8, gelu, tied
        return transformers.BioGptConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=64, **ids)
    if arch == "ctrl":  # 64 sinusoidal positions, embeddings x 8, relu, an lm head bias, tied
        return transformers.CTRLConfig(n_layer=2, n_embd=64, n_head=4, dff=128, n_positions=64, **ids)
    if arch == "gpt_neox_japanese":  # 3 layers (the last with its dense_bias), 8 of 16 head dims rotating, tied
        return transformers.GPTNeoXJapaneseConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                                                  intermediate_multiple_size=2, max_position_embeddings=256,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                   "partial_rotary_factor": 0.5}, **ids)
    raise ValueError(f"unknown tiny arch {arch!r}; choose bloom, mpt, openai_gpt, biogpt, ctrl or gpt_neox_japanese")
