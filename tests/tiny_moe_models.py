"""The tiny models of the mixture-of-experts families (Qwen3-MoE, Mixtral, Qwen2-MoE, gpt-oss, GLM-4.5, dots.llm1,
MiniMax-M2, OLMoE, Granite 3 MoE, ERNIE 4.5 MoE, Hunyuan MoE), the MLA families (DeepSeek-V3, DeepSeek-V2-Lite,
GLM-4.7-Flash) and Llama 4: their HF configs (tiny_models.make_tiny_model builds and saves them)."""

TINY_MOE_ARCHS = ("qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss",   # mixture of experts: 8 experts of width 32, top 2
                  "glm4_moe", "dots1", "minimax_m2", "olmoe", "granitemoe", "granitemoeshared",
                  "ernie4_5_moe", "hunyuan_moe")
# multi-head latent attention, experts after the first layer: q_lora_rank 24 with YaRN x4 from 32 (DeepSeek-V3), q_proj
# without q_lora_rank (DeepSeek-V2-Lite), GLM-4.7-Flash's rope without interleaving
TINY_MLA_ARCHS = ("deepseek_v3", "deepseek_v2", "glm4_moe_lite")
# Llama 4: its text model, and the same inside Llama4ForConditionalGeneration with a tiny vision model
TINY_LLAMA4_ARCHS = ("llama4", "llama4_mm")


def moe_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import GptOssConfig, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig

    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                  num_experts_per_tok=2, rope_theta=10000.0)
    if arch == "qwen3_moe":  # q/k norm, renormalised top-k, layer 1 dense (mlp_only_layers), head_dim 32
        return Qwen3MoeConfig(num_hidden_layers=3, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
                              norm_topk_prob=True, mlp_only_layers=[1], head_dim=32, tie_word_embeddings=False,
                              **common)
    if arch == "mixtral":  # softmax over the top-k logits, tied embeddings, a window of 12 on every layer
        return MixtralConfig(num_hidden_layers=2, num_local_experts=8, intermediate_size=32, sliding_window=12,
                             tie_word_embeddings=True, **common)
    if arch == "qwen2_moe":  # q/k/v bias, shared expert with its sigmoid gate, top-k not renormalised,
        # decoder_sparse_step 2: layers 1 and 3 sparse, 0 and 2 dense
        return Qwen2MoeConfig(num_hidden_layers=4, num_experts=8, moe_intermediate_size=32, intermediate_size=96,
                              shared_expert_intermediate_size=48, norm_topk_prob=False, decoder_sparse_step=2,
                              tie_word_embeddings=False, **common)
    if arch == "gpt_oss":  # sliding (window 6), full, sliding; sinks; YaRN x4 from 64; a SwiGLU clamp that binds
        return GptOssConfig(num_hidden_layers=3, num_local_experts=8, intermediate_size=32, head_dim=16,
                            sliding_window=6, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                            swiglu_limit=0.5, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                             "truncate": False, "original_max_position_embeddings": 64,
                                             "rope_theta": 10000.0},
                            **{k: v for k, v in common.items() if k != "rope_theta"})
    return _deepseek_style_moe_config(arch, common)


def _deepseek_style_moe_config(arch: str, common: dict):
    """GLM-4.5 and dots.llm1 (MiniMax-M2 below): sigmoid routing with a correction bias that changes the choice (save_tiny_model), 4
    groups of 2 experts of which only the best one is chosen from, weights x 2.5, one un-gated shared expert, layer 0 dense."""
    from transformers import Dots1Config, Glm4MoeConfig

    moe = dict(num_hidden_layers=3, n_routed_experts=8, moe_intermediate_size=32, intermediate_size=96,
               n_group=4, topk_group=1, routed_scaling_factor=2.5, n_shared_experts=1, first_k_dense_replace=1,
               tie_word_embeddings=False, **common)
    if arch == "glm4_moe":  # q/k/v biases, per-head q/k norms, head_dim 32 with its first 16 dims rotating
        return Glm4MoeConfig(head_dim=32, attention_bias=True, use_qk_norm=True, norm_topk_prob=True,
                             partial_rotary_factor=0.5, **moe)
    if arch == "dots1":  # Qwen3's attention with biases on all four projections; weights not renormalised;
        # full, sliding (window 6), full
        return Dots1Config(attention_bias=True, norm_topk_prob=False, sliding_window=6,
                           layer_types=["full_attention", "sliding_attention", "full_attention"], **moe)
    if arch == "minimax_m2":  # sigmoid routing with the correction bias, no groups; whole-width q/k norms; the
        # first 16 of 32 head dims rotating
        from transformers import MiniMaxM2Config

        return MiniMaxM2Config(num_hidden_layers=2, num_local_experts=8, intermediate_size=32, head_dim=32,
                               tie_word_embeddings=False,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.5},
                               **{k: v for k, v in common.items() if k != "rope_theta"})
    return _more_moe_config(arch, common)


def _more_moe_config(arch: str, common: dict):
    """OLMoE, Granite 3 MoE, Hunyuan MoE (every layer sparse) and ERNIE 4.5 MoE: 8 experts of width 32, top 2."""
    import transformers

    common = {k: v for k, v in common.items() if k != "rope_theta"}
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if arch == "olmoe":  # whole-width q/k norms, then q, k and v clamped at 1 (binds), biases on all four
        # projections, top-k not renormalised
        return transformers.OlmoeConfig(num_hidden_layers=2, num_experts=8, intermediate_size=32, norm_topk_prob=False,
                                        clip_qkv=1.0, attention_bias=True, tie_word_embeddings=False,
                                        rope_parameters=rope, **common)
    granite = dict(num_hidden_layers=2, num_local_experts=8, intermediate_size=32, embedding_multiplier=3.0,
                   residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0, attention_bias=True,
                   tie_word_embeddings=False, rope_parameters=rope, **common)
    if arch == "granitemoe":  # Granite's multipliers, softmax over the top-k logits
        return transformers.GraniteMoeConfig(**granite)
    if arch == "granitemoeshared":  # and a shared MLP of width 48
        return transformers.GraniteMoeSharedConfig(shared_intermediate_size=48, **granite)
    if arch == "ernie4_5_moe":  # interleaved rope; softmax with the correction bias (save_tiny_model), renormalised;
        # layer 0 dense, 1..3 sparse every other one (1, 3), 2 shared experts, tied
        return transformers.Ernie4_5_MoeConfig(num_hidden_layers=4, moe_num_experts=8, moe_k=2, moe_intermediate_size=32,
                                               intermediate_size=96, moe_num_shared_experts=2, moe_layer_start_index=1,
                                               moe_layer_interval=2, tie_word_embeddings=True, rope_parameters=rope,
                                               **{k: v for k, v in common.items() if k != "num_experts_per_tok"})
    if arch == "hunyuan_moe":  # per-head q/k norms after rope, biases on all four projections, NTK alpha 50 rope;
        # softmax top k renormalised, a shared MLP in every layer
        return transformers.HunYuanMoEV1Config(num_hidden_layers=2, num_experts=8, moe_topk=2, intermediate_size=32,
                                               head_dim=16, attention_bias=True, tie_word_embeddings=False,
                                               rope_parameters={"rope_type": "dynamic", "alpha": 50.0, "factor": 1.0,
                                                                "rope_theta": 10000.0},
                                               **{k: v for k, v in common.items() if k != "num_experts_per_tok"})
    raise ValueError(f"unknown tiny MoE arch {arch!r}; choose from {TINY_MOE_ARCHS}")


def mla_config(arch: str, vocab: int, eos: int, pad: int):
    """MLA with every difference binding: kv_lora_rank 32, a rope key of 8 dims, v_head_dim 16 != qk_head_dim 24,
    4 heads; the first layer dense, the others 8 experts of width 32, top 2, one shared expert, scaled weights, groups
    that bind (V3's sigmoid with the correction bias, V2's group-limited softmax)."""
    import transformers

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
                  rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                  kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, tie_word_embeddings=False)
    experts = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                   routed_scaling_factor=2.5)
    if arch == "deepseek_v3":  # interleaved rope; YaRN x4 from 32 to 128 whose mscale_all_dim also scales the scores
        common["max_position_embeddings"] = 128
        yarn = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.707, "beta_fast": 32.0,
                "beta_slow": 1.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0}
        return transformers.DeepseekV3Config(num_hidden_layers=3, first_k_dense_replace=1, q_lora_rank=24,
                                             n_group=4, topk_group=2, norm_topk_prob=True, rope_parameters=yarn,
                                             **common, **experts)
    if arch == "deepseek_v2":  # DeepSeek-V2-Lite's shape: q_proj from the hidden states; interleaved (complex) rope
        return transformers.DeepseekV2Config(num_hidden_layers=2, first_k_dense_replace=1, q_lora_rank=None,
                                             topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                             rope_theta=10000.0, **common, **experts)
    config = getattr(transformers, "Glm4MoeLiteConfig")  # AttributeError where this transformers lacks it
    return config(num_hidden_layers=2, mlp_layer_types=["dense", "sparse"], q_lora_rank=24, rope_interleave=False,
                  n_group=2, topk_group=1, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common,
                  **experts)


def llama4_config(arch: str, vocab: int, eos: int, pad: int):
    """4 layers: layer 3 NoPE with temperature tuning from position 3 on (floor_scale 4), the others rotating
    interleaved pairs with L2 q/k norms, attending within chunks of 8 tokens; layers 1 and 3 sparse (8 experts of
    width 32, top 1, and the shared expert), 0 and 2 dense of width 96; untied."""
    from transformers import Llama4TextConfig

    text = Llama4TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                            max_position_embeddings=256, no_rope_layers=[1, 1, 1, 0], attention_chunk_size=8,
                            interleave_moe_layer_step=2, num_local_experts=8, num_experts_per_tok=1,
                            use_qk_norm=True, attn_temperature_tuning=True, floor_scale=4, attn_scale=0.5,
                            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "llama4":
        text.architectures = ["Llama4ForCausalLM"]
        return text
    from transformers import Llama4Config, Llama4VisionConfig

    vision = Llama4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=16, patch_size=4, vision_output_dim=32, projector_input_dim=32,
                                projector_output_dim=64)
    config = Llama4Config(text_config=text.to_dict(), vision_config=vision.to_dict(), tie_word_embeddings=False)
    config.architectures = ["Llama4ForConditionalGeneration"]
    return config
