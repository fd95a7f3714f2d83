"""Tiny random models of the DeepSeek Sparse Attention families (runtime/models/dsa.py): DeepSeek-V3.2, GLM-5 and
A.X K2, each with every difference binding and index_topk above the tests' prompts (the served context's cap) but
below max_position_embeddings.  tiny_models.py builds and saves them (tiny_more_models.TINY_DSA_ARCHS); their config
classes are transformers 5.25's (an AttributeError where it lacks them).
"""

INDEX_TOPK = 32


def dsa_config(arch: str, vocab: int, eos: int, pad: int):
    """MLA as tiny_models' DeepSeek-V3 (kv_lora_rank 32, rope key 8, v_head_dim 16 != qk_head_dim 24, 4 heads,
    q_lora_rank 24); layer 0 dense, layer 1 8 experts of width 32, top 2, one shared expert, scaled weights; indexers
    of 2 heads of 16."""
    import transformers

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
                  rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                  kv_lora_rank=32, q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  tie_word_embeddings=False, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                  n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True, num_hidden_layers=2,
                  mlp_layer_types=["dense", "sparse"], index_topk=INDEX_TOPK, index_n_heads=2,
                  index_head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "deepseek_v32":
        common["max_position_embeddings"] = 128
        common["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.707,
                                     "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 32,
                                     "rope_theta": 10000.0}
        return transformers.DeepseekV32Config(n_group=4, topk_group=2, **common)
    if arch == "glm_moe_dsa":
        return transformers.GlmMoeDsaConfig(n_group=1, topk_group=1, indexer_types=["full", "shared"], **common)
    if arch == "axk2":
        return transformers.AXK2Config(n_group=4, topk_group=2, gated_norm_rank=8, **common)
    raise ValueError(f"unknown tiny DSA arch {arch!r}")
