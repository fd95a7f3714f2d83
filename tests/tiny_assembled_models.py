"""Tiny random models of the families HF assembles from other families' layers (runtime/models/assembled.py): Solar
Open, EXAONE MoE, FlexOlmo, Youtu-LLM and A.X K1, each with every difference binding.  tiny_models.py builds and saves
them (TINY_ASSEMBLED_ARCHS); their config classes are transformers 5.25's (an AttributeError where it lacks them).
"""


def assembled_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, rms_norm_eps=1e-5, eos_token_id=eos,
                  pad_token_id=pad, bos_token_id=None, max_position_embeddings=256, num_experts_per_tok=2,
                  moe_intermediate_size=32, routed_scaling_factor=2.5, tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    deepseek_routing = dict(n_group=4, topk_group=2, norm_topk_prob=True)
    if arch == "solar_open":  # every layer sparse, q/k/v biases, head_dim 32 != 64 / 4, every head dim rotating
        return transformers.SolarOpenConfig(num_hidden_layers=2, num_key_value_heads=2, head_dim=32, n_routed_experts=8,
                                            n_shared_experts=1, attention_bias=True, **deepseek_routing, **common)
    if arch == "exaone_moe":  # sliding (window 6), full (no rope), sliding; layer 1 dense by mlp_layer_types
        # (first_k_dense_replace would make layer 0 dense); per-head q/k norms; 2 shared experts
        return transformers.ExaoneMoeConfig(num_hidden_layers=3, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                                            num_experts=8, num_shared_experts=2, sliding_window=6,
                                            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                            mlp_layer_types=["sparse", "dense", "sparse"], **deepseek_routing, **common)
    if arch == "flex_olmo":  # OLMo 2's post norms and whole-width q/k norms, biases on all four projections,
        # OLMoE's softmax top 2 of 8 experts, not renormalised
        flex = {k: v for k, v in common.items() if k not in ("moe_intermediate_size", "routed_scaling_factor")}
        return transformers.FlexOlmoConfig(num_hidden_layers=2, num_key_value_heads=2, num_experts=8,
                                           intermediate_size=32, attention_bias=True, norm_topk_prob=False, **flex)
    mla = dict(num_key_value_heads=4, intermediate_size=128, kv_lora_rank=32, q_lora_rank=24, qk_nope_head_dim=16,
               qk_rope_head_dim=8, v_head_dim=16)
    if arch == "youtu":  # MLA (interleaved rope) with dense MLPs in every layer; tied embeddings; no pad token (HF's
        # Youtu zeroes the pad row of the embeddings it loads, and with them the tied lm head's: not the checkpoint's)
        dense = {k: v for k, v in common.items() if k not in ("num_experts_per_tok", "moe_intermediate_size",
                                                               "routed_scaling_factor", "tie_word_embeddings",
                                                               "pad_token_id")}
        return transformers.YoutuConfig(num_hidden_layers=2, tie_word_embeddings=True, **mla, **dense)
    if arch == "axk1":  # DeepSeek-V3 with layer 0 dense (mlp_layer_types), the post-MLP norm on layer 1
        return transformers.AXK1Config(num_hidden_layers=2, mlp_layer_types=["dense", "sparse"],
                                       n_routed_experts=8, n_shared_experts=1, **deepseek_routing, **mla, **common)
    raise ValueError(f"unknown tiny assembled arch {arch!r}")
