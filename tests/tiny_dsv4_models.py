"""Tiny random models of the newer DeepSeek- and Qwen3-MoE-derived families (runtime/models/ergo.py ...), each with
every difference binding.  tiny_models.py builds and saves them (TINY_DSV4_ARCHS); their config classes are
transformers 5.25's.

ergo: layers sliding (window 6, interleaved rope), sliding, full (no rope, scores x 2.5), sliding; layer 0 dense
(relu^2 of width 96), the others 8 relu^2 experts of width 24 (sigmoid, the correction bias, top 2 renormalised,
times 2.5) each with its own output norm, and a shared expert of width 40 with its norm; per-head q/k norms.
zaya: sliding (window 6, rope base 1000), full (base 500000), sliding layers, each rotating half of its 16 dims;
convolutions of widths 2 and 2 over q/k, delayed values, every bias on; 4 experts of width 24 and the "no expert"
choice, a router of width 32 carried across layers; tied embeddings with lm_head's bias.
beam: sliding (window 6), full (no rope, queries scaled by position), sliding layers with the output gate and its
bias; layer 0 dense, the others 8 experts of width 24 in 4 groups (2 compete), top 2 renormalised, times 2.5;
logits soft-capped at 3; rms_norm_eps 0.1, so that the residual stream's depth scaling shows through the norms.
dots3_note: indexed (4 heads, kv_lora_rank 16, rope base 10000), sliding (window 6, 2 heads, kv_lora_rank 32, its own
head dims, rope base 1000), indexed layers: the pool padded to the widest; layer 0 dense, the others 8 experts in 4
groups (2 compete), top 2 renormalised, times 2.5, a shared expert of width 40; index_topk 64 caps the context.
hy_v4: 3 residual streams per token, MLA (q_lora_rank 24, kv_lora_rank 16) with a gate per head dim and sinks,
indexers full, shared, full; layer 0 dense, the others as dots3_note's with experts clamped at 0.5.
"""


def dsv4_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    if arch == "ergo":
        return transformers.ErgoConfig(
            vocab_size=vocab, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            first_dense_intermediate_size=96, num_dense_blocks=1, moe_intermediate_size=24,
            shared_intermediate_size=40, num_experts=8, num_experts_per_tok=2, moe_routed_scaling_factor=2.5,
            max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=6, global_attention_every_n_layers=3,
            global_attention_scale=2.5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "zaya":
        rope = {"hybrid": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "hybrid_sliding": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}}
        return transformers.ZayaConfig(
            vocab_size=vocab, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
            max_position_embeddings=256, sliding_window=6, layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
            num_experts=4, num_experts_per_tok=1, moe_intermediate_size=24, router_hidden_size=32,
            attention_bias=True, lm_head_bias=True, tie_word_embeddings=True, rope_parameters=rope)
    if arch == "beam":   # an epsilon large enough that the residual stream's scale (the depth scaling) shows
        return transformers.BeamConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rms_norm_eps=0.1, eos_token_id=eos, pad_token_id=pad,
            bos_token_id=None, max_position_embeddings=256, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"], num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
            final_logit_softcapping=3.0, attention_bias=False, tie_word_embeddings=False,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": None})
    if arch == "dots3_note":
        return transformers.Dots3NoteTextConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=4, head_dim=24, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=16, swa_num_attention_heads=2, swa_num_key_value_heads=2,
            swa_q_lora_rank=20, swa_kv_lora_rank=32, swa_head_dim=32, swa_qk_nope_head_dim=24, swa_v_head_dim=12,
            sliding_window=6, layer_types=["indexed_attention", "sliding_attention", "indexed_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"], n_routed_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, n_shared_experts=1, shared_experts_intermediate_size=40, n_group=4,
            topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, index_topk=64, index_head_dim=16,
            index_n_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
            bos_token_id=None, tie_word_embeddings=False, rope_theta=10000.0, swa_rope_theta=1000.0)
    if arch == "hy_v4":
        return transformers.HYV4Config(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            mlp_layer_types=["dense", "sparse", "sparse"], indexer_types=["full", "shared", "full"],
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=24, n_shared_experts=1, n_group=4,
            topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, swiglu_limit=0.5, hc_mult=3,
            index_topk=64, index_head_dim=16, index_n_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
            eos_token_id=eos, pad_token_id=pad, bos_token_id=None, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    raise ValueError(f"unknown tiny DSV4 arch {arch!r}")
