"""Tiny Gemma 4 models for tiny_models.make_tiny_model, each feature set far from neutral.

gemma4: 5 layers [sliding, full, sliding, sliding, full], the last two reusing the KV of layers 2 and 1
(num_kv_shared_layers 2) with double-wide MLPs; sliding layers 2 KV heads of 16 dims, window 8; full layers one KV
head of 32 dims whose V is K (attention_k_eq_v), rotated by proportional rope on half of each half; per-layer inputs
of width 8; logits soft-capped at 3; tied.
gemma4_moe: 4 layers [sliding, full, sliding, full], every one with 8 experts of width 32 (top 2) beside its MLP; full
layers of 32 dims with their own V (2 KV heads); no per-layer inputs, no KV sharing; untied.
gemma4_mm: gemma4's text model inside Gemma4ForConditionalGeneration with the smallest vision and audio towers.
"""

SLIDING, FULL = "sliding_attention", "full_attention"


def gemma4_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import Gemma4TextConfig

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, global_head_dim=32, rms_norm_eps=1e-6, eos_token_id=eos, pad_token_id=pad,
                  bos_token_id=None, max_position_embeddings=256, sliding_window=8,
                  rope_parameters={SLIDING: {"rope_type": "default", "rope_theta": 100.0},
                                   FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                          "rope_theta": 1000.0}})
    if arch == "gemma4_moe":
        config = Gemma4TextConfig(num_hidden_layers=4, layer_types=[SLIDING, FULL, SLIDING, FULL],
                                  hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=8, top_k_experts=2,
                                  moe_intermediate_size=32, final_logit_softcapping=None, tie_word_embeddings=False,
                                  **common)
        config.architectures = ["Gemma4ForCausalLM"]
        return config
    text = Gemma4TextConfig(num_hidden_layers=5, layer_types=[SLIDING, FULL, SLIDING, SLIDING, FULL],
                            num_kv_shared_layers=2, use_double_wide_mlp=True, attention_k_eq_v=True,
                            num_global_key_value_heads=1, hidden_size_per_layer_input=8,
                            vocab_size_per_layer_input=vocab, final_logit_softcapping=3.0, tie_word_embeddings=True,
                            **common)
    if arch == "gemma4":
        text.architectures = ["Gemma4ForCausalLM"]
        return text
    from transformers import Gemma4Config

    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=64)
    audio = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[4, 4],
                 output_proj_dims=16, conv_kernel_size=3)
    config = Gemma4Config(text_config=text.to_dict(), vision_config=vision, audio_config=audio,
                          tie_word_embeddings=True)
    config.architectures = ["Gemma4ForConditionalGeneration"]
    return config
