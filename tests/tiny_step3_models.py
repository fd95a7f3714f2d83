"""The STEP3 group's tiny model: Step3p7ForConditionalGeneration (HF's Step 3.7 Flash layout) with a one-layer vision
tower of 32.  Its text model binds each of its own options: sliding and full layers with their own rope base and
rotated dims, fewer query heads on the sliding layers, q/k biases, query_pre_attn_scalar, a dense layer then two of 4
experts (top 2, sigmoid scores with the correction bias, times 2.5) beside a shared expert, and clamps on the dense
MLP (swiglu_limits_shared), the shared expert and the experts (swiglu_limits) small enough to cut.  step3p7_yarn:
the same with more query heads on the sliding layers than on the full ones, whose rope is YaRN's (rope_scaling)."""

LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention"]
WINDOW = 4
LIMITS = [0.0, 0.08, 0.06]          # the experts' clamp per layer (the dense layer has none)
SHARED_LIMITS = [0.07, 0.09, 0.0]   # the dense MLP's and the shared experts' clamp per layer


def step3_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import Step3p7Config

    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                num_sliding_attention_heads=2, num_key_value_heads=2, head_dim=16, layer_types=LAYER_TYPES,
                sliding_window=WINDOW, rope_theta=[10000.0, 500000.0, 10000.0], partial_rotary_factors=[0.5, 1.0, 0.5],
                mlp_layer_types=["dense", "sparse", "sparse"], n_routed_experts=4, num_experts_per_tok=2,
                moe_intermediate_size=32, share_expert_dim=48, moe_router_scaling_factor=2.5, attention_bias=True,
                query_pre_attn_scalar=24, swiglu_limits=LIMITS, swiglu_limits_shared=SHARED_LIMITS,
                rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256)
    if arch == "step3p7_yarn":
        text.update(num_sliding_attention_heads=8, partial_rotary_factors=[0.5, 1.0, 0.5],
                    rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=8))
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=56, patch_size=14,
                  mlp_ratio=2.0)
    config = Step3p7Config(text_config=text, vision_config=vision, image_token_id=vocab - 1)
    config.architectures = ["Step3p7ForConditionalGeneration"]
    return config
