"""Tiny gated delta-net hybrids for tiny_models.make_tiny_model: layers 0, 1 and 3 linear attention, layer 2 full
attention; 4 key heads of 16 dims serving 8 value heads of 8 (grouped), convolution width 4, partial rotary (half
of head_dim 32), attention with an output gate; Qwen3-Next with 8 experts top 2 (norm_topk_prob) and a gated shared
expert, layer 3 dense (mlp_only_layers); Qwen3.5 dense."""

LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]


def hybrid_config(arch: str, vocab: int, eos: int, pad: int):
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=32, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                  max_position_embeddings=256, num_hidden_layers=4, layer_types=LAYER_TYPES, linear_num_key_heads=4,
                  linear_num_value_heads=8, linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                  tie_word_embeddings=False)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    if arch == "qwen3_next":
        from transformers import Qwen3NextConfig

        return Qwen3NextConfig(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                               shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                               mlp_only_layers=[3], rope_parameters=rope, **common)
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(rope_parameters={**rope, "mrope_section": [4, 2, 2], "mrope_interleaved": True}, **common)


def qwen3_5_moe_multimodal(vocab: int, eos: int, pad: int):
    """Qwen3.5-MoE as released: Qwen3_5MoeForConditionalGeneration over a hybrid language model with 8 experts top 2
    on every layer (always renormalised) and a gated shared expert; interleaved M-RoPE sections over the rotated half
    of each head; a one-layer vision tower."""
    from transformers import Qwen3_5MoeConfig

    text = hybrid_config("qwen3_5", vocab, eos, pad).to_dict()
    text.update(model_type="qwen3_5_moe_text", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                shared_expert_intermediate_size=48)
    vision = dict(depth=1, hidden_size=32, num_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                  intermediate_size=64, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    return config
