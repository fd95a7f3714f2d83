"""Tiny HF configs of Cohere 2 MoE, BitNet, Emu3's and Aria's text models (tiny_models.py builds and saves them), each
with what sets it apart binding on the test prompts (26 tokens): windows of 6, a dense layer that rotates although
full, experts with shared ones, sub-norms around 1."""

TINY_NEWTEXT_ARCHS = ("cohere2_moe", "cohere2_moe_rms", "bitnet", "aria_text", "emu3", "cohere_compass", "apertus1p5", "gemma4_unified")


def newtext_config(arch: str, vocab: int, eos: int, pad: int):
    import transformers

    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, eos_token_id=eos,
                  pad_token_id=pad, bos_token_id=None, max_position_embeddings=256)
    if arch in ("cohere2_moe", "cohere2_moe_rms"):
        # a dense full layer that rotates (width 96), sliding (window 6), sliding, full without rope; 8 experts of
        # width 32, top 2, one shared; logits x 0.5; "cohere2_moe": LayerNorms, softmax, averaged, biases on q/k/v/o,
        # tied; "cohere2_moe_rms": RMSNorms, sigmoid scores not renormalised, summed, untied
        rms = arch == "cohere2_moe_rms"
        variant = (dict(rms_norm_eps=1e-5, expert_selection_fn="sigmoid", norm_topk_prob=False,
                        shared_expert_combination_strategy="sum", tie_word_embeddings=False) if rms else
                   dict(attention_bias=True, shared_expert_combination_strategy="average"))
        return transformers.Cohere2MoeConfig(
            num_hidden_layers=4, head_dim=16, intermediate_size=32, prefix_dense_intermediate_size=96,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"], sliding_window=6, num_experts=8,
            num_experts_per_tok=2, num_shared_experts=1, logit_scale=0.5, layer_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **variant, **common)
    if arch == "bitnet":  # sub-norms on the attention output and the relu^2 MLP's product; untied
        return transformers.BitNetConfig(num_hidden_layers=2, intermediate_size=128, rms_norm_eps=1e-5,
                                         tie_word_embeddings=False,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    if arch == "aria_text":  # 8 experts of width 32, top 2, two shared experts (one MLP of width 64); untied
        return transformers.AriaTextConfig(num_hidden_layers=2, intermediate_size=32, moe_num_experts=8, moe_topk=2,
                                           moe_num_shared_experts=2, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    if arch == "emu3":  # Llama's layer; built from the multimodal config (its text model saves as emu3_text_model)
        text = dict(num_hidden_layers=2, intermediate_size=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **dict(common, bos_token_id=eos))
        return transformers.Emu3Config(text_config=text)
    if arch == "cohere_compass":  # sliding (window 6, rope base 100), full without rope, sliding; biases on q/k/v/o;
        # logits x 0.5; tied
        ropes = {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0}, "full_attention": None}
        return transformers.CohereCompassTextConfig(
            num_hidden_layers=3, head_dim=16, intermediate_size=128, sliding_window=6, attention_bias=True,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters=ropes,
            logit_scale=0.5, layer_norm_eps=1e-5, **common)
    if arch == "apertus1p5":  # Apertus with 16 embedding rows past its pruned lm head (the tokenizer's vocabulary);
        # xIELU, q/k norms, biases on q/k/v/o; untied
        return transformers.Apertus1p5TextConfig(
            num_hidden_layers=2, intermediate_size=128, rms_norm_eps=1e-5, attention_bias=True,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **dict(common, vocab_size=vocab + 16, output_vocab_size=vocab))
    if arch == "gemma4_unified":  # tiny_gemma4_models' gemma4 without per-layer inputs: sliding (window 8, 2 KV heads
        # of 16) and full layers (one KV head of 32 whose V is K, proportional rope on half of each half), the last two
        # reusing earlier layers' KV with double-wide MLPs; logits soft-capped at 3; tied
        sliding, full = "sliding_attention", "full_attention"
        ropes = {sliding: {"rope_type": "default", "rope_theta": 100.0},
                 full: {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1000.0}}
        config = transformers.Gemma4UnifiedTextConfig(
            num_hidden_layers=5, layer_types=[sliding, full, sliding, sliding, full], intermediate_size=48,
            head_dim=16, global_head_dim=32, rms_norm_eps=1e-6, sliding_window=8, rope_parameters=ropes,
            num_kv_shared_layers=2, use_double_wide_mlp=True, attention_k_eq_v=True, num_global_key_value_heads=1,
            final_logit_softcapping=3.0, tie_word_embeddings=True, **common)
        config.architectures = ["Gemma4UnifiedForCausalLM"]
        return config
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {TINY_NEWTEXT_ARCHS}")
