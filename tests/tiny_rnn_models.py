"""Tiny models of the "rnn" group's recurrent families for tiny_models.make_tiny_model.

Zamba (zamba): 5 layers of Mamba-1 mixers (128 channels in 2 heads, state 8, dt rank 6, convolution width 4 with a
bias, projection biases), layers 2 and 4 hybrid over the shared block (attention of 4 query heads of 32 dims over 2
KV heads, a GELU MLP), tied embeddings.
RecurrentGemma (recurrent_gemma): hidden 48 (sqrt(48) not a bfloat16), layers recurrent, recurrent, attention,
recurrent: RG-LRU of width 64 in 4 blocks, convolution width 4; local attention of 4 heads of 12 dims (6 rotated) over
1 KV head with q/k/v biases and a window of 6 keys; logits soft-capped at 3.
xLSTM (xlstm): 3 mLSTM layers of hidden 128, 4 heads (q/k 16 dims, v 32), gates soft-capped at 3, projection and norm
biases, a SwiGLU of 192, logits soft-capped at 5.
RWKV-4 (rwkv): 4 layers of hidden 32 (as many WKV channels), a channel mix of 64, the stream halved after every 2 layers.
"""


def rnn_config(arch: str, vocab: int, eos: int, pad: int):
    if arch == "recurrent_gemma":
        return recurrent_gemma_config(vocab, eos, pad)
    if arch == "xlstm":
        from transformers import xLSTMConfig

        return xLSTMConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=3, num_heads=4, qk_dim_factor=0.5,
                           v_dim_factor=1.0, use_bias=True, weight_mode="single",
                           gate_soft_cap=3.0, output_logit_soft_cap=5.0, ffn_proj_factor=1.5,
                           ffn_round_up_to_multiple_of=16, norm_eps=1e-6, eps=1e-6, eos_token_id=eos,
                           pad_token_id=pad, bos_token_id=None, tie_word_embeddings=False)
    if arch == "rwkv":
        from transformers import RwkvConfig

        return RwkvConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=4, attention_hidden_size=32,
                          intermediate_size=64, rescale_every=2, layer_norm_epsilon=1e-5, eos_token_id=eos,
                          pad_token_id=pad, bos_token_id=None, tie_word_embeddings=False)
    from transformers import ZambaConfig

    return ZambaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=48, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, n_mamba_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
        bos_token_id=None, max_position_embeddings=256, layers_block_type=["mamba", "mamba", "hybrid", "mamba", "hybrid"],
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=6, mamba_conv_bias=True, mamba_proj_bias=True,
        hidden_act="gelu", tie_word_embeddings=True)


def recurrent_gemma_config(vocab: int, eos: int, pad: int):
    from transformers import RecurrentGemmaConfig

    return RecurrentGemmaConfig(
        vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=1, lru_width=64, attention_window_size=6, conv1d_width=4, logits_soft_cap=3.0,
        rms_norm_eps=1e-6, block_types=["recurrent", "recurrent", "attention"], attention_bias=True,
        eos_token_id=eos, pad_token_id=pad, bos_token_id=None, tie_word_embeddings=True)
