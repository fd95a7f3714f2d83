"""Tiny HF configs of GraniteSWA, GraniteMoeSWA, LFM3, HRM-Text and Dory (tiny_models.py builds and saves them), each with what sets it apart
binding on the test prompts (26 tokens): a window of 6 on the sliding layers, sinks (save_tiny_model draws them around
0.5), a rope base per layer with one layer without rope, Granite's multipliers far from 1."""

TINY_D2_ARCHS = ("granite_swa", "granitemoe_swa", "lfm3", "hrm_text", "dory", "gpt_neo", "codegen", "persimmon", "xglm",
                 "jetmoe")
# in the common checks (tiny_models.FAMILY_ARCHS); GraniteMoeSWA (GraniteSWA's attention over GraniteMoeShared's
# experts, both in the common checks already) prefills and decodes in test_d2_families.py
D2_COMMON_CHECK_ARCHS = ("granite_swa",)


def d2_config(arch: str, vocab: int, eos: int, pad: int):
    from tiny_more_dense import config_class

    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256)
    # full (base 10000), sliding without rope, sliding (base 100); biases on q/k/v/o; untied
    swa = dict(num_hidden_layers=3, sliding_window=6, layer_types=["full_attention", "sliding_attention",
                                                                   "sliding_attention"],
               layer_rope_theta=[10000.0, 0, 100.0], attention_bias=True, embedding_multiplier=6.0,
               residual_multiplier=0.3, attention_multiplier=0.7, logits_scaling=4.0, tie_word_embeddings=False,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    if arch == "granite_swa":  # and biases on the gated MLP
        return config_class("GraniteSWAConfig")(intermediate_size=128, mlp_bias=True, **swa)
    if arch == "granitemoe_swa":  # 8 experts of width 32, top 2, a shared MLP of width 48
        return config_class("GraniteMoeSWAConfig")(num_local_experts=8, num_experts_per_tok=2, intermediate_size=32,
                                                   shared_intermediate_size=48, **swa)
    if arch == "lfm3":  # conv, full (proportional rope: 4 of 8 pairs at base 100, factor 2), sliding (window 6, the
        # default rope), conv; sandwich norms, the gate, biases on q/k/v/o and the convolutions, untied
        ropes = {"full_attention": {"rope_type": "proportional", "rope_theta": 100.0, "partial_rotary_factor": 0.5,
                                    "factor": 2.0},
                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        types = ["conv", "full_attention", "sliding_attention", "conv"]
        return config_class("Lfm3Config")(num_hidden_layers=4, layer_types=types, sliding_window=6, head_dim=16,
                                          intermediate_size=96, conv_L_cache=3, conv_bias=True, attention_bias=True,
                                          norm_eps=1e-5, rope_parameters=ropes, tie_word_embeddings=False,
                                          **{k: v for k, v in common.items() if k != "rms_norm_eps"})
    if arch == "hrm_text":  # stacks of 2 layers, 2 high cycles of 2 low ones (12 KV layers); biases on q/k/v/o, the
        # gate and the MLP; embeddings x 3; untied
        return config_class("HrmTextConfig")(num_hidden_layers=2, H_cycles=2, L_cycles=2, intermediate_size=96, head_dim=16,
                                             attention_bias=True, mlp_bias=True, embedding_scale=3.0,
                                             tie_word_embeddings=False,
                                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                             **{k: v for k, v in common.items() if k != "num_key_value_heads"})
    if arch == "dory":  # input layer (sliding, window 6), recurrent full and sliding layers looped twice, output layer
        # (full); rope bases 10000 (sliding) and 100 (full); nGPT's scales near 1 (initializer_range 0.5); untied
        types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
        ropes = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                 "full_attention": {"rope_type": "default", "rope_theta": 100.0}}
        return config_class("DoryConfig")(num_hidden_layers=4, n_input_layers=1, n_output_layers=1,
                                          n_recurrent_loops=2, layer_types=types, sliding_window=6, head_dim=16,
                                          intermediate_size=96, initializer_range=0.5, ngpt_alpha_init=2.0,
                                          rope_parameters=ropes, tie_word_embeddings=False,
                                          **{k: v for k, v in common.items() if k != "rms_norm_eps"})
    import transformers

    ids = dict(vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if arch == "gpt_neo":  # global, local (window 6), global; 64 learned positions; gelu_new; tied
        return transformers.GPTNeoConfig(num_layers=3, attention_types=[[["global", "local"], 1], [["global"], 1]],
                                         window_size=6, hidden_size=64, num_heads=4, intermediate_size=128,
                                         max_position_embeddings=64, activation_function="gelu_new",
                                         layer_norm_epsilon=1e-5, **ids)
    if arch == "codegen":  # 8 heads of 8 dims over the 4 shards, 4 dims rotating in interleaved pairs; untied
        return transformers.CodeGenConfig(n_layer=2, n_embd=64, n_head=8, n_inner=128, n_positions=256, rotary_dim=4,
                                          activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                          tie_word_embeddings=False, **ids)
    if arch == "persimmon":  # 4 of 16 head dims rotating, relu^2, biased q/k LayerNorms; untied
        return transformers.PersimmonConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                            intermediate_size=128, max_position_embeddings=256, layer_norm_eps=1e-5,
                                            qk_layernorm=True, tie_word_embeddings=False,
                                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                             "partial_rotary_factor": 0.25}, **ids)
    if arch == "xglm":  # 64 sinusoidal positions at offset 2, embeddings x 8, gelu, tied
        return transformers.XGLMConfig(num_layers=2, d_model=64, attention_heads=4, ffn_dim=128,
                                       max_position_embeddings=64, activation_function="gelu", **ids)
    if arch == "jetmoe":  # 8 attention experts and 8 MLP experts of width 32, top 2: queries of 2 heads of 16 per
        # chosen expert over 2 K/V heads; untied
        return transformers.JetMoeConfig(num_hidden_layers=2, hidden_size=64, num_key_value_heads=2, kv_channels=16,
                                         intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                         max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **ids)
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {TINY_D2_ARCHS}")
