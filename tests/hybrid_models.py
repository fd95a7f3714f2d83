"""Tiny hybrids for tiny_models.make_tiny_model: layers 0, 1 and 3 recurrent, layer 2 attention.

Gated delta nets: 4 key heads of 16 dims serving 8 value heads of 8 (grouped), convolution width 4, partial rotary
(half of head_dim 32), attention with an output gate; Qwen3-Next with 8 experts top 2 (norm_topk_prob) and a gated
shared expert, layer 3 dense (mlp_only_layers); Qwen3.5 dense.
Granite 4.0 (Mamba-2): 8 heads of 16 dims in 2 groups, state 8, convolution width 4 with a bias; Granite's four
multipliers; with 8 experts top 2 and a shared MLP, rotary attention (granitemoehybrid), or dense with projection biases
and attention without rotary (granitemoehybrid_dense, the legacy layer names).
Bamba and Nemotron-H (mamba_config): the same mixers, 8 heads of 16 dims in 2 groups; Bamba's rotary over half of each
head and a SwiGLU MLP; Nemotron-H's one block per layer, with 8 relu^2 experts top 2 in 2 groups (the best 1 group
competes), a correction bias, routed_scaling_factor 1.5 and a latent width of 24 (nemotron_h), or Nemotron Nano 2's
mamba, MLP and attention blocks only (nemotron_h_dense).  Falcon-H1: 3 layers of a mixer (6 heads of 16 dims, narrower
than mamba_expand x hidden_size, normed before the gate, biases on both projections) beside rotary attention (with
biases), every muP multiplier away from 1 (falcon_h1); or without the mixer's norm and any bias, with tied embeddings
(falcon_h1_plain)."""

LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]


def hybrid_config(arch: str, vocab: int, eos: int, pad: int):
    if arch.startswith(("bamba", "nemotron_h", "falcon_h1")):
        return mamba_config(arch, vocab, eos, pad)
    if arch.startswith("granitemoehybrid"):
        return _granite_hybrid(arch, vocab, eos, pad)
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
    del text["intermediate_size"]   # not a field of Qwen3.5-MoE's config: every layer has experts
    vision = dict(depth=1, hidden_size=32, num_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                  intermediate_size=64, out_hidden_size=64, num_position_embeddings=16)
    config = Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    return config


def _granite_hybrid(arch: str, vocab: int, eos: int, pad: int):
    from transformers import GraniteMoeHybridConfig

    dense = arch == "granitemoehybrid_dense"
    kinds = ["mamba", "mamba", "attention", "mamba"] if dense else LAYER_TYPES
    return GraniteMoeHybridConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        max_position_embeddings=256, layer_types=kinds, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2,
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True, mamba_proj_bias=dense,
        num_local_experts=0 if dense else 8, num_experts_per_tok=2, shared_intermediate_size=48,
        position_embedding_type=None if dense else "rope", rope_parameters={"rope_type": "default", "rope_theta": 1e4},
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0,
        attention_bias=dense, tie_word_embeddings=not dense)


def mamba_config(arch: str, vocab: int, eos: int, pad: int):
    common = dict(vocab_size=vocab, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                  tie_word_embeddings=False)
    if arch == "bamba":
        from transformers import BambaConfig

        return BambaConfig(intermediate_size=48, num_hidden_layers=4, attn_layer_indices=[2], mamba_n_heads=8,
                           mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                           mamba_conv_bias=True, rms_norm_eps=1e-5,
                           rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **common)
    if arch.startswith("falcon_h1"):
        from transformers import FalconH1Config

        full = arch == "falcon_h1"
        common["tie_word_embeddings"] = not full
        return FalconH1Config(intermediate_size=48, num_hidden_layers=3, mamba_d_ssm=96, mamba_n_heads=6,
                              mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=4, mamba_conv_bias=True,
                              mamba_proj_bias=full, projectors_bias=full, attention_bias=full, mamba_rms_norm=full,
                              mamba_norm_before_gate=True, rms_norm_eps=1e-5, embedding_multiplier=1.5,
                              lm_head_multiplier=0.8, ssm_in_multiplier=0.9, ssm_out_multiplier=1.2,
                              ssm_multipliers=[0.5, 1.5, 0.8, 1.25, 2.0], mlp_multipliers=[0.7, 1.3],
                              key_multiplier=1.4, attention_in_multiplier=0.6, attention_out_multiplier=1.1,
                              rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **common)
    from transformers import NemotronHConfig

    dense = arch == "nemotron_h_dense"
    kinds = ["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"] if dense else [
        "linear_attention", "moe", "full_attention", "linear_attention", "moe"]
    return NemotronHConfig(layers_block_type=kinds, head_dim=16, intermediate_size=48, mamba_num_heads=8,
                           mamba_head_dim=16, n_groups=2, ssm_state_size=8, conv_kernel=4, use_conv_bias=True,
                           use_bias=dense, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                           moe_shared_expert_intermediate_size=40, n_group=2, topk_group=1, norm_topk_prob=True,
                           routed_scaling_factor=1.5, moe_latent_size=None if dense else 24, layer_norm_epsilon=1e-5,
                           **common)


def forget_convolution_inputs(monkeypatch) -> None:
    """Every forward pass starts each row's convolution from zeros (the oracle must notice the carried inputs)."""
    from radixlm.runtime.models import recurrent_state

    begin = recurrent_state.RecurrentStates.begin

    def forget(self, fb):
        begin(self, fb)
        self.conv.zero_()
    monkeypatch.setattr(recurrent_state.RecurrentStates, "begin", forget)
