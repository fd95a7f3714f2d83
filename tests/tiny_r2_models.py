"""Tiny recurrent models for tiny_models.make_tiny_model: the attention-free stacks and three more hybrids.

Mamba-2 (mamba2): 3 layers of 8 heads of 16 dims in 2 groups, state 8, convolution width 4 with a bias, projection
biases, a dt limit that clamps.  Mamba (mamba): 3 layers of 128 channels (expand 2), state 8, dt rank 6, convolution
width 4 with a bias, projection biases, untied embeddings.  Falcon Mamba (falcon_mamba): the same without biases, its
dt, B and C RMS-normalised (mixer_rms_eps), tied embeddings.
OLMo Hybrid (olmo_hybrid): gated delta-net layers 0, 2 and 3 (4 heads, keys of 16 dims, values of 8, beta up to 2),
rotary attention at layer 1 with 2 KV heads; rms_norm_eps 1e-6 (the delta nets' output norm keeps HF's 1e-5).
Jamba (jamba): Mamba-1 mixers (128 channels, state 8, dt rank 6, weighted dt/B/C norms) at layers 0, 1 and 3,
attention without rotary at layer 2, 8 experts top 2 (never renormalised) at layers 1 and 3, dense MLPs at 0 and 2.
Zamba2 (zamba2): 5 Mamba-2 layers (8 heads of 16 dims in 2 groups, state 8, dt clamped below at 0.05), layers 1, 3
and 4 hybrid over 2 shared blocks (rotary attention of 4 heads of 32 dims, a GELU MLP, adapters of rank 4), tied
embeddings.
"""


def r2_config(arch: str, vocab: int, eos: int, pad: int):
    if arch == "olmo_hybrid":
        return olmo_hybrid_config(vocab, eos, pad)
    if arch == "jamba":
        return jamba_config(vocab, eos, pad)
    if arch == "zamba2":
        return zamba2_config(vocab, eos, pad)
    common = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=3, conv_kernel=4, use_conv_bias=True,
                  layer_norm_epsilon=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if arch == "mamba2":
        from transformers import Mamba2Config

        return Mamba2Config(num_heads=8, head_dim=16, n_groups=2, state_size=8, expand=2, use_bias=True, chunk_size=16,
                            time_step_limit=(0.05, 1.5), tie_word_embeddings=False, **common)
    if arch == "mamba":
        from transformers import MambaConfig

        return MambaConfig(state_size=8, expand=2, time_step_rank=6, use_bias=True, tie_word_embeddings=False,
                           **common)
    from transformers import FalconMambaConfig

    return FalconMambaConfig(state_size=8, expand=2, time_step_rank=6, use_bias=False, mixer_rms_eps=1e-5,
                             tie_word_embeddings=True, **common)


def olmo_hybrid_config(vocab: int, eos: int, pad: int):
    from transformers import OlmoHybridConfig

    return OlmoHybridConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-6, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, layer_types=["linear_attention", "full_attention", "linear_attention",
                                                  "linear_attention"],
        linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, linear_allow_neg_eigval=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4})


def jamba_config(vocab: int, eos: int, pad: int):
    from transformers import JambaConfig

    return JambaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, num_experts=8, num_experts_per_tok=2, expert_layer_period=2,
        expert_layer_offset=1, attn_layer_period=4, attn_layer_offset=2, mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2, mamba_dt_rank=6, mamba_conv_bias=True, mamba_proj_bias=False, tie_word_embeddings=False)


def zamba2_config(vocab: int, eos: int, pad: int):
    from transformers import Zamba2Config

    return Zamba2Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=48, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=4, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=2, n_mamba_heads=8, time_step_min=0.05,
        chunk_size=16, num_mem_blocks=2, use_shared_attention_adapter=True, adapter_rank=4, use_mem_rope=True,
        hidden_act="gelu",
        add_bias_linear=False, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
