"""Tiny random models of the "moremoe" group: LongCat-Flash (runtime/models/longcat_flash.py), MiMo-V2-Flash
(mimo_v2_flash.py), Doge (doge.py), Kolibri 1.1 (kolibri1_1.py).  tiny_models.py builds
and saves them (tiny_more_models.TINY_MOREMOE_ARCHS); their config classes are transformers 5.25's.
"""


def moremoe_config(arch: str, vocab: int, eos: int, pad: int):
    """LongCat-Flash: 2 layers (4 MLA sublayers: 4 heads, q_lora_rank 24, kv_lora_rank 32, rope key 8, v_head_dim
    16), dense MLPs of width 64, 8 experts of width 32 and 4 zero experts, top 3, weights x 2; untied."""
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if arch == "longcat_flash":
        return transformers.LongcatFlashConfig(
            num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=64, q_lora_rank=24, kv_lora_rank=32,
            qk_nope_head_dim=16, qk_rope_head_dim=8, head_dim=8, v_head_dim=16, moe_topk=3, n_routed_experts=8,
            zero_expert_num=4, expert_ffn_hidden_size=32, routed_scaling_factor=2.0, max_position_embeddings=256,
            rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **ids)
    if arch == "mimo_v2_flash":  # full, sliding (window 6, sinks), sliding, full; 2 KV heads on full layers, 4 on
        # sliding ones; heads of 24 (8 rotating, a rope base per type), values of 16 times 0.7; q/k/v biases; layer 0
        # dense, then 8 experts of width 32 in 2 groups (1 chosen), top 2, weights x 2; untied
        return transformers.MiMoV2FlashConfig(
            num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
            v_head_dim=16, intermediate_size=64, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
            n_group=2, topk_group=1, routed_scaling_factor=2.0, norm_topk_prob=True, sliding_window=6,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            attention_value_scale=0.7, attention_bias=True, max_position_embeddings=256, rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.334},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.334}}, **ids)
    if arch == "doge":  # 2 layers of 4 heads of 16 over 2 KV heads, a window of 6, biases on the attention (dt_proj
        # too) and the MLP; A's random values make the dynamic mask bind; untied
        return transformers.DogeConfig(
            num_hidden_layers=2, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
            sliding_window=6, keep_window_size=256, attention_bias=True, mlp_bias=True, max_position_embeddings=256,
            rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **ids)
    if arch == "kolibri1_1":  # sliding (window 6), indexed (no rope, NVFP4 K/V), indexed reading layer 1's K/V,
        # sliding; layer 0 dense (width 40), the others 8 experts of width 24, the correction bias on the logits, top 2,
        # a shared MLP of width 40; a dense budget of 64 + 16 + 4 keys (the served context)
        return transformers.Kolibri1_1Config(
            num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            layer_types=["sliding_attention", "indexed_attention", "indexed_attention", "sliding_attention"],
            index_layers=[1], kv_source_layers=[0, 1, 1, 3], mlp_only_layers=[0], mlp_only_intermediate_size=40,
            index_topk=64, index_pool_size=64, index_compression=16, index_num_heads=2, index_num_local_tokens=16,
            index_num_sink_tokens=4, sliding_window=6, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
            shared_expert_intermediate_size=40, norm_topk_prob=True, max_position_embeddings=256, rms_norm_eps=1e-5,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **ids)
    raise ValueError(f"unknown tiny moremoe arch {arch!r}")
