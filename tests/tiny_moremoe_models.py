"""Tiny random models of the "moremoe" group: LongCat-Flash (runtime/models/longcat_flash.py), MiMo-V2-Flash
(mimo_v2_flash.py), Doge (doge.py).  tiny_models.py builds
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
    raise ValueError(f"unknown tiny moremoe arch {arch!r}")
