"""Tiny LFM2 models for tiny_models.make_tiny_model: layers 0, 1 and 3 short convolutions (width 3), layer 2
attention (4 heads of 16 dims, 2 KV heads, q/k norms).
lfm2: biases on the convolutions' projections and the convolution itself, a feed-forward width auto-adjusted
(intermediate_size 120 -> 2/3 -> x1.5 -> a multiple of 16: 128), tied embeddings.
lfm2_moe: layer 0 dense (width 96), layers 1-3 with 8 experts of width 32, top 2, sigmoid scores, the expert bias for
the choice, renormalised, times 2.5; untied."""

LAYER_TYPES = ["conv", "conv", "full_attention", "conv"]


def lfm2_config(arch: str, vocab: int, eos: int, pad: int):
    common = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                  layer_types=LAYER_TYPES, conv_L_cache=3, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    if arch == "lfm2":
        from transformers import Lfm2Config

        return Lfm2Config(intermediate_size=120, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.5,
                          block_multiple_of=16, conv_bias=True, tie_word_embeddings=True, **common)
    from transformers import Lfm2MoeConfig

    return Lfm2MoeConfig(intermediate_size=96, moe_intermediate_size=32, num_dense_layers=1, num_experts=8,
                         num_experts_per_tok=2, use_expert_bias=True, routed_scaling_factor=2.5, norm_topk_prob=True,
                         conv_bias=False, tie_word_embeddings=False, **common)
