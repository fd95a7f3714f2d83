"""Whether the lm head is the embedding matrix.  HF ties it only where tie_word_embeddings is set and its model class
declares tied weights: NemotronH, Kimi Linear, Ling 3 and xLSTM declare none and keep an lm head of their own whatever
the flag says.  Zamba's and Zamba2's tied weights are also their shared blocks, which tie_word_embeddings=False unties
into one block per layer."""

UNTIES_SHARED_BLOCKS = ("ZambaForCausalLM", "Zamba2ForCausalLM")


def ties_lm_head(arch: str, hf_config) -> bool:
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    if arch in UNTIES_SHARED_BLOCKS and not tied:
        raise ValueError(f"{arch}: tie_word_embeddings=False is not supported (HF then unties the shared attention "
                         "blocks too, one copy per hybrid layer)")
    if not tied:
        return False
    try:
        import transformers

        hf_class = getattr(transformers, arch, None)
    except Exception:   # a modeling file this transformers cannot import: the flag decides
        hf_class = None
    return hf_class is None or bool(getattr(hf_class, "_tied_weights_keys", True))
