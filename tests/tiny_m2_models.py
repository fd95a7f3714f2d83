"""Tiny random models of the newer families HF builds from DeepSeek, Qwen3-MoE and GLM-4-MoE pieces
(runtime/models/deepseek.py ...), each with every difference binding.  tiny_models.py builds and saves them
(TINY_M2_ARCHS); their config classes are transformers 5.25's (an AttributeError where it lacks them).

mistral4: DeepSeek-V3's attention (q_lora_rank 24, interleaved rope over 8 of the 32 head dims), YaRN x16 from 8
whose original context also starts Llama 4's query scaling (beta 0.5) at position 8; layer 0 dense, the others 8
experts of width 24 in 4 groups (2 compete), softmax scores, top 2 renormalised, times 2.5, one shared expert.
minicpm5_moe: the output gate from q_gate_proj, 2 kv heads of head_dim 32 != 64 / 4; layer 1 dense by
mlp_layer_types (first_k_dense_replace would make layer 0 dense), the others DeepSeek-V3's routing (8 experts of
width 24 in 4 groups, 2 compete, top 2 renormalised, times 2.5) and 2 shared experts.
kolibri1: sliding (window 6), full (no rope), sliding layers with per-head q/k norms and GLM-4's four norms; 8 experts
of width 24 in every layer, the correction bias on the logits, top 2 renormalised, a shared MLP of width 40.
hy_v3: per-head q/k norms, biases on all four attention projections; layer 1 dense by mlp_layer_types, the others 8
experts of width 24 (sigmoid, the correction bias, top 2 renormalised, times 2.5) and 2 shared experts.
laguna: sliding (window 6, rope base 1000 on every dim), full (base 500000 on half the dims), sliding layers; per-head
q/k norms, attention biases, a softplus gate per head dim; layer 1 dense, the others 8 experts of width 24 (logits
soft-capped at 1.5, sigmoid, the correction bias, top 2 renormalised, times 2.5) and a shared MLP of width 40.
mellum: the same layers rotating every dim, with Qwen3-MoE's attention and routing (top 2 of the softmax, not
renormalised).
flint: sliding (window 6), full (no rope), sliding layers with sinks, q/k norms and attention biases; layer 1 dense
(mlp_only_layers), the others 8 experts of width 24 (sigmoid, top 2 not renormalised) and a shared MLP of width 40.
"""

def m2_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    if arch == "mistral4":
        rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0, "original_max_position_embeddings": 8,
                "max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                "mscale_all_dim": 0.707, "llama_4_scaling_beta": 0.5, "partial_rotary_factor": 0.25}
        return transformers.Mistral4Config(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=4, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
            max_position_embeddings=128, kv_lora_rank=32, q_lora_rank=24, qk_nope_head_dim=24, qk_rope_head_dim=8,
            v_head_dim=16, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, n_shared_experts=1, n_group=4, topk_group=2, norm_topk_prob=True,
            routed_scaling_factor=2.5, tie_word_embeddings=False, rope_parameters=rope)
    if arch == "minicpm5_moe":
        return transformers.MiniCPM5MoeConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
            bos_token_id=None, max_position_embeddings=256, mlp_layer_types=["sparse", "dense", "sparse"],
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=2, n_group=4,
            topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "kolibri1":
        return transformers.Kolibri1Config(
            vocab_size=vocab, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
            max_position_embeddings=256, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], num_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40, norm_topk_prob=True,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "hy_v3":
        return transformers.HYV3Config(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
            bos_token_id=None, max_position_embeddings=256, attention_bias=True,
            mlp_layer_types=["sparse", "dense", "sparse"], num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, num_shared_experts=2, router_scaling_factor=2.5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch in ("laguna", "mellum"):
        rope = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}}
        common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos,
                      pad_token_id=pad, bos_token_id=None, max_position_embeddings=256, sliding_window=6,
                      layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                      mlp_layer_types=["sparse", "dense", "sparse"], num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=24, attention_bias=True, tie_word_embeddings=False, rope_parameters=rope)
        if arch == "mellum":   # every head dim rotating (HF's Mellum rotates whole heads only)
            del rope["full_attention"]["partial_rotary_factor"]
            return transformers.MellumConfig(norm_topk_prob=False, **common)
        return transformers.LagunaConfig(gating="per-element", shared_expert_intermediate_size=40,
                                         moe_routed_scaling_factor=2.5, moe_router_logit_softcapping=1.5, **common)
    if arch == "flint":
        return transformers.FlintConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
            bos_token_id=None, max_position_embeddings=256, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], mlp_only_layers=[1],
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40,
            norm_topk_prob=False, attention_bias=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    raise ValueError(f"unknown tiny M2 arch {arch!r}")
