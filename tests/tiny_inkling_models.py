"""Tiny models of the "inkling" group for tiny_models.make_tiny_model.

Inkling (inkling): hidden 32, 4 layers, sliding, full, sliding, full; the sliding layers 4 query heads of 8 dims over 2
KV heads with a window of 5 keys (shorter than the tests' prompts), the full ones 2 query heads of 16 dims over 1 KV
head with a learned distance bias reaching 7 keys and log scaling from position 4; relative states of 4 dims per head;
short convolutions of width 3; layer 0 a dense SwiGLU of 48, the others 4 routed experts of 16 (top 2) and 2 shared;
the logits cut 4 short of the head.
Inkling 2 (inkling2): the same head shapes, window, bias and log scaling in 5 layers (full, sliding, full, sliding,
sliding), attention-residual blocks of 2 layers, clips at 0.3 (q, k) and 0.1 (relative states) so they bite, experts'
softcaps of 0.5, logits capped at 2, a head 8 rows short of the embedding.
Inkling 2 Loop (inkling2_loop): Inkling 2's with 7 layers, layers 2-5 run 3 times with message gates of rank 8.
"""


def inkling_config(arch: str, vocab: int, eos: int, pad: int):
    if arch in ("inkling2", "inkling2_loop"):
        return inkling2_config(vocab, eos, pad, loop=arch == "inkling2_loop")
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    return InklingTextConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8, sliding_window_size=5,
        d_rel=4, rel_extent=7, log_scaling_n_floor=4, log_scaling_alpha=0.5, local_layer_ids=[0, 2],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], intermediate_size=48, moe_intermediate_size=16,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, route_scale=2.0, conv_kernel_size=3,
        logits_mup_width_multiplier=0.5, unpadded_vocab_size=vocab - 4, max_position_embeddings=256,
        rms_norm_eps=1e-6, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)


def inkling2_config(vocab: int, eos: int, pad: int, loop: bool = False):
    from transformers.models.inkling2.configuration_inkling2 import Inkling2TextConfig
    from transformers.models.inkling2_loop.configuration_inkling2_loop import Inkling2LoopTextConfig

    fields = dict(
        vocab_size=vocab, unpadded_vocab_size=vocab - 8, hidden_size=32, num_hidden_layers=5, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=8,
        sliding_window_size=5, d_rel=4, rel_extent=7, log_scaling_n_floor=4, log_scaling_alpha=0.5,
        layer_types=["hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid_sliding"],
        moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, route_scale=2.0, conv_kernel_size=3,
        qk_l2_clip_threshold=0.3, rel_l2_clip_threshold=0.1, n_layers_per_attn_res_block=2, mlp_gate_softcap=0.5,
        mlp_up_softcap=0.5, final_logit_softcapping=2.0, max_position_embeddings=256, rms_norm_eps=1e-6,
        eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    if not loop:
        return Inkling2TextConfig(**fields)
    return Inkling2LoopTextConfig(**{**fields, "num_hidden_layers": 7, "layer_types": [
        "hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid_sliding", "hybrid", "hybrid_sliding"]},
        loop_layer_index_start=2, loop_layer_index_end=6, loop_num_passes=3, loop_gate_rank=8)
