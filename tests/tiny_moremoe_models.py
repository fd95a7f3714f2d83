"""Tiny random models of the "moremoe" group: LongCat-Flash (runtime/models/longcat_flash.py).  tiny_models.py builds
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
    raise ValueError(f"unknown tiny moremoe arch {arch!r}")
