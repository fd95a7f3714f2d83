"""Tiny recurrent models for tiny_models.make_tiny_model (task R2): the attention-free stacks.

Mamba-2 (mamba2): 3 layers of 8 heads of 16 dims in 2 groups, state 8, convolution width 4 with a bias, projection
biases, a dt limit that clamps.  Mamba (mamba): 3 layers of 128 channels (expand 2), state 8, dt rank 6, convolution
width 4 with a bias, projection biases, untied embeddings.  Falcon Mamba (falcon_mamba): the same without biases, its
dt, B and C RMS-normalised (mixer_rms_eps), tied embeddings.
"""


def r2_config(arch: str, vocab: int, eos: int, pad: int):
    common = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=3, conv_kernel=4, use_conv_bias=True,
                  layer_norm_epsilon=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if arch == "mamba2":
        from transformers import Mamba2Config

        return Mamba2Config(num_heads=8, head_dim=16, n_groups=2, state_size=8, expand=2, use_bias=True,
                            time_step_limit=(0.05, 1.5), tie_word_embeddings=False, **common)
    if arch == "mamba":
        from transformers import MambaConfig

        return MambaConfig(state_size=8, expand=2, time_step_rank=6, use_bias=True, tie_word_embeddings=False,
                           **common)
    from transformers import FalconMambaConfig

    return FalconMambaConfig(state_size=8, expand=2, time_step_rank=6, use_bias=False, mixer_rms_eps=1e-5,
                             tie_word_embeddings=True, **common)
