"""Tiny HF configs of GIT's text decoder and XLM's causal LMs served as causal LMs (tiny_models.py builds and saves
them): 2 layers, hidden 64, 4 heads, 64 positions.  GIT: a tiny vision config (its weights read and dropped), relu,
an untied `output` head; XLM: causal, two languages with language embeddings (a plain input_ids call adds none), relu
or gelu, learned or sinusoidal positions, its pad id absent from the test prompts (HF blanks a prompt's end by its pad
count)."""


def encdec_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, bos_token_id=None)
    if arch == "git":
        vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=8,
                      patch_size=4)
        return transformers.GitConfig(vision_config=vision, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=96, max_position_embeddings=64, hidden_act="relu",
                                      layer_norm_eps=1e-5, pad_token_id=pad, architectures=["GitForCausalLM"], **ids)
    xlm = dict(emb_dim=64, n_layers=2, n_heads=4, max_position_embeddings=64, causal=True, n_langs=2, lang_id=1,
               layer_norm_eps=1e-5, pad_token_id=4, architectures=["XLMWithLMHeadModel"], **ids)
    if arch == "xlm_sinusoidal":
        xlm.update(sinusoidal_embeddings=True, gelu_activation=False)
    return transformers.XLMConfig(**xlm)
