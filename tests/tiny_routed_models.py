"""Tiny random models of the families with their own routing or attention (tiny_models.TINY_ROUTED_ARCHS): every
feature far from neutral, so that leaving one out moves the logits (test_routed_families.py)."""


def routed_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    common = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, tie_word_embeddings=False)
    if arch == "phimoe":  # LayerNorm layers; biases on all four projections; sparsemixer whose mask binds (jitter
        # 0.3: experts within 60% of the best compete); LongRoPE with its short mscale (the prompts stay below 64);
        # a window of 12 on every layer
        half = 8   # head_dim 16: 8 rotated pairs
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 64,
                "short_factor": [1.0 + 0.5 * i for i in range(half)], "long_factor": [2.0 + i for i in range(half)],
                "short_mscale": 1.3, "long_mscale": 1.1}
        return transformers.PhimoeConfig(hidden_size=64, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256,
                                         num_local_experts=8, num_experts_per_tok=2, router_jitter_noise=0.3,
                                         attention_bias=True, sliding_window=12, rope_parameters=rope, **common)
    if arch == "dbrx":  # fused Wqkv clamped at 0.6 (binds), bias-free LayerNorms, 8 experts of width 32, top 3
        # divided by their 2-norm, rope base 500000 (attn_config's, and rope_parameters' for HF 5)
        attn = {"kv_n_heads": 2, "clip_qkv": 0.6, "rope_theta": 500000.0}
        ffn = {"ffn_hidden_size": 32, "moe_num_experts": 8, "moe_top_k": 3, "moe_normalize_expert_weights": 2.0}
        return transformers.DbrxConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=256, attn_config=attn,
                                       ffn_config=ffn, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                       **common)
    if arch == "minicpm3":  # MLA (q_lora_rank 24, kv_lora_rank 32, a rope key of 8 dims, v_head_dim 16), rotate-half
        # LongRoPE short factors (the original context is the whole one, as MiniCPM3-4B's); embeddings x 3, each
        # sublayer x 0.5 / sqrt(2), logits / 4; tied, as MiniCPM3-4B
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 256,
                "short_factor": [1.0, 1.5, 2.0, 4.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}
        return transformers.MiniCPM3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5,
                                           max_position_embeddings=256, q_lora_rank=24, kv_lora_rank=32,
                                           qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, scale_emb=3.0,
                                           scale_depth=0.5, dim_model_base=16, rope_parameters=rope,
                                           **dict(common, tie_word_embeddings=True))
    if arch == "afmoe":  # sliding (window 6, rope), full (NoPE), sliding; gated attention with q/k norms and biases;
        # layer 0 dense, 1-2 sparse: sigmoid routing with the expert bias (random), weights x 2.5, 2 shared experts;
        # embeddings x 8 (mup)
        return transformers.AfmoeConfig(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                        num_hidden_layers=3, num_dense_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                                        max_position_embeddings=256, num_experts=8, num_experts_per_tok=2,
                                        num_shared_experts=2, route_scale=2.5, sliding_window=6,
                                        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                        mup_enabled=True, attention_bias=True,
                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    raise ValueError(f"unknown tiny routed arch {arch!r}")
