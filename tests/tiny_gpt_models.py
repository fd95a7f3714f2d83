"""Tiny random GPT-2, GPT-BigCode, GPT-NeoX, GPT-J and OPT configs for tests/tiny_models.py (hidden 64, 4 heads of
16 dims, MLP width 128), each with what sets its family apart binding: learned positions over a table of 64 (the
context length), partial rotary, the parallel residual, biases and activations as their checkpoints have them."""

TINY_GPT_ARCHS = ("gpt2", "gpt_bigcode", "gpt_neox", "gptj", "opt", "falcon")
# a family's other layout: their own tests (test_gpt_families.py), not FAMILY_ARCHS
TINY_GPT_VARIANT_ARCHS = ("gpt_bigcode_mha", "gpt_neox_sequential", "opt_350m", "falcon_7b", "falcon_sequential")


def gpt_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    gpt2 = dict(n_layer=2, n_embd=64, n_head=4, n_inner=128, n_positions=64, layer_norm_epsilon=1e-5, **ids)
    if arch == "gpt2":  # Conv1D weights, gelu_new, tied
        return transformers.GPT2Config(activation_function="gelu_new", **gpt2)
    if arch.startswith("gpt_bigcode"):  # one K/V head (multi_query); the variant: 4, each head's q/k/v rows together
        return transformers.GPTBigCodeConfig(multi_query=arch == "gpt_bigcode", **gpt2)
    neox = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, hidden_act="gelu",
                max_position_embeddings=256, layer_norm_eps=1e-5, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}, **ids)
    if arch == "gpt_neox":  # 4 of 16 head dims rotating, the parallel residual over two LayerNorms, biases
        return transformers.GPTNeoXConfig(use_parallel_residual=True, attention_bias=True, **neox)
    if arch == "gpt_neox_sequential":  # the sequential residual, no attention biases
        return transformers.GPTNeoXConfig(use_parallel_residual=False, attention_bias=False, **neox)
    if arch == "gptj":  # 8 of 16 head dims rotating in interleaved pairs, one LayerNorm, lm head bias, untied
        return transformers.GPTJConfig(n_layer=2, n_embd=64, n_head=4, n_inner=128, n_positions=256, rotary_dim=8,
                                       activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                       tie_word_embeddings=False, **ids)
    if arch.startswith("falcon"):
        return _falcon_config(arch, ids)
    # OPT: learned positions at offset 2 (64 of them), ReLU, biases; OPT-350m's shape: embeddings 32 wide
    # (project_in/out) and post-LayerNorms
    return transformers.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                                  max_position_embeddings=64, activation_function="relu",
                                  do_layer_norm_before=arch == "opt",
                                  word_embed_proj_dim=64 if arch == "opt" else 32, **ids)


def _falcon_config(arch: str, ids: dict):
    """Falcon 40B's layout: 4 query heads in 2 K/V groups, ln_attn and ln_mlp in parallel, untied; Falcon 7B's: one K/V
    head, one LayerNorm read in parallel, tied; and sequential layers with each head's q/k/v rows together.  Biases
    on every linear layer, the rope base 100."""
    import transformers

    falcon = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, bias=True,
                  max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 100.0}, **ids)
    if arch == "falcon":
        return transformers.FalconConfig(new_decoder_architecture=True, num_kv_heads=2, tie_word_embeddings=False,
                                         **falcon)
    if arch == "falcon_7b":
        return transformers.FalconConfig(multi_query=True, parallel_attn=True, **falcon)
    return transformers.FalconConfig(multi_query=False, parallel_attn=False, **falcon)
