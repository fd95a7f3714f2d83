"""Tiny MiniMax-M3 language models (runtime/models/minimax_m3.py), every difference binding.  tiny_models.py builds
and saves them (TINY_MINIMAXM3_ARCHS); the config class is transformers 5's MiniMaxM3VLTextConfig.

minimax_m3: layers sparse-attention (an indexer of 2 heads, blocks of 4 keys, the top 8 blocks: a dense budget of 32
tokens, which caps the context), full, sparse; layer 0 dense (width 96), the others 8 experts of width 24 (sigmoid,
the correction bias, top 2 renormalised, times 2.5) and a shared MLP of width 40; every MLP's SwiGLU clamped at 1.0
with alpha 1.5; half of each head's 16 dims rotating (partial_rotary_factor; rotary_dim 4 is not read by HF).
"""


def minimaxm3_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    return transformers.MiniMaxM3VLTextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=24, dense_intermediate_size=96,
        shared_intermediate_size=40, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=8, num_experts_per_tok=2, routed_scaling_factor=2.5, swiglu_limit=1.0, swiglu_alpha=1.5,
        rotary_dim=4, rms_norm_eps=1e-6, max_position_embeddings=256, eos_token_id=eos, pad_token_id=pad,
        bos_token_id=None, tie_word_embeddings=False,
        layer_types=["minimax_m3_sparse", "full_attention", "minimax_m3_sparse"],
        mlp_layer_types=["dense", "sparse", "sparse"], index_n_heads=2, index_head_dim=16, index_block_size=4,
        index_topk_blocks=8, index_local_blocks=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
