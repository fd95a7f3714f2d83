"""Tiny HF configs of the linear-attention hybrids (tiny_models.py builds and saves them), each with what sets it apart
binding on the test prompts (24-26 tokens).

LaraMini (lara_mini): 5 layers in the released pattern, gated delta net, sliding (window 6, rotary), gated delta net,
full (no rotary), sliding; 4 heads of 16 dims over 2 KV heads; delta nets of 4 key heads of 16 dims serving 8 value
heads of 8 (grouped), convolution width 4; 8 experts of width 24 top 2 (renormalised) and an un-gated shared expert of
width 48 on every layer; tied embeddings.
MiniMax (minimax): 4 layers, attention (rotary, window 6), lightning, attention, lightning; 4 heads of 16 dims (the
attention over 2 KV heads); 8 experts of width 32 top 2; every alpha and beta factor away from 1; untied embeddings.
Kimi Linear (kimi_linear): 4 layers, KDA, latent attention (4 heads, kv_lora_rank 16, nope 16 + rope 8 dims, values of
16), KDA, KDA; KDA of 4 heads of 16 dims, convolution width 4; layer 0 a dense SwiGLU of 96, the others 8 experts of
width 32 top 2 in 2 groups (the best 1 competes), sigmoid scores with the correction bias, routed_scaling_factor 2.5
and one shared expert; untied embeddings.
Ling 3 (bailing_hybrid): the same shapes in 3 layers, KDA, KDA, latent attention (rotary over 8 dims, a gate per head);
full-rank gates, the safe forget gate (bound -5); layer 0 dense, the others experts.
Qwen4-Exp (qwen4_exp): 4 layers, delta net, delta net, gated attention (4 heads of 32 dims over 2 KV heads, rotary over
a quarter of each head, a QSA indexer whose budget of 128 keys covers every test prompt), delta net; 8 experts of width
32 top 2 and a gated shared expert of 48 on every layer; 2 residual streams with hyper-connections of rank 8.
"""



def linear_config(arch: str, vocab: int, eos: int, pad: int):
    if arch == "minimax":
        return minimax_config(vocab, eos, pad)
    if arch == "kimi_linear":
        return kimi_linear_config(vocab, eos, pad)
    if arch == "bailing_hybrid":
        return bailing_hybrid_config(vocab, eos, pad)
    if arch == "qwen4_exp":
        return qwen4_exp_config(vocab, eos, pad)
    from transformers import LaraMiniConfig

    return LaraMiniConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, rms_norm_eps=1e-6, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, sliding_window=6, linear_num_key_heads=4, linear_num_value_heads=8,
        linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=48, norm_topk_prob=True,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def minimax_config(vocab: int, eos: int, pad: int):
    from transformers import MiniMaxConfig

    return MiniMaxConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, sliding_window=6, num_local_experts=8, num_experts_per_tok=2,
        layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"], block_size=8,
        full_attn_alpha_factor=1.5, full_attn_beta_factor=0.7, linear_attn_alpha_factor=0.8,
        linear_attn_beta_factor=1.3, mlp_alpha_factor=1.2, mlp_beta_factor=0.6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def kimi_linear_config(vocab: int, eos: int, pad: int):
    from transformers import KimiLinearConfig

    return KimiLinearConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, linear_num_heads=4, linear_head_dim=16, linear_conv_kernel_dim=4,
        num_local_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
        routed_scaling_factor=2.5, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, tie_word_embeddings=False,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"])


def bailing_hybrid_config(vocab: int, eos: int, pad: int):
    from transformers import BailingHybridConfig

    return BailingHybridConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, head_dim=8, short_conv_kernel_size=4, layer_group_size=3,
        num_local_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
        first_k_dense_replace=1, routed_scaling_factor=2.5, rms_norm_eps=1e-5, rope_theta=10000.0, num_mtp_layers=0,
        eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256, tie_word_embeddings=False)


def qwen4_exp_config(vocab: int, eos: int, pad: int):
    from transformers import Qwen4ExpTextConfig

    config = Qwen4ExpTextConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, hc_count=2, hc_lowrank=8, indexer_n_heads=2, indexer_kv_heads=1,
        indexer_head_dim=16, indexer_budget=128, indexer_compress_ratio=4, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 2], "mrope_interleaved": True})
    config.architectures = ["Qwen4ExpForCausalLM"]
    return config
