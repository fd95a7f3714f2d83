"""Tiny Muse Glimmer and Muse Spark checkpoints served for text (runtime/models/muse.py, muse_spark.py,
muse_config.py), group MUSE: the WHOLE conditional-generation model saved by transformers, its vision tower one layer
of 32 (tiny_vl_text_models.multimodal_config), its projector 64 wide, Spark's audio tower two stages of 16 and 32.

Every distinguishing option set so that it binds: 3 layers, sliding (window 6), full, sliding, the NoPE layer the
last (a sliding one, the full one rotating: layer_types and layer_rope_theta read apart); q/k/v/o biases; the
post-sublayer norms at an epsilon (0.05) far from rms_norm_eps's; logits times 0.7, soft-capped at 3; image, video
(and Spark's audio) token ids inside the vocabulary, which HF's text path embeds as id 0.  Spark: a dense layer, then
two of 4 experts (top 2, times 1.5) 48 wide between their projections, residual gates at temperature 0.5.
Each text_config ties (tie_word_embeddings), which HF's models do not read: Glimmer ties by the top-level flag
(muse_glimmer_tied sets it), Spark never.

make_muse(tmp_path_factory, name) -> Path, name one of MUSE.
"""

from tiny_models import make_tiny_tokenizer, save_tiny_model

MUSE = {"muse_glimmer": 4200, "muse_spark": 4201, "muse_glimmer_tied": 4202}   # name -> the seed of its weights
IMAGE_ID, VIDEO_ID, AUDIO_ID = 40, 41, 42
_TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, sliding_window=6, max_position_embeddings=256,
             layer_types=["sliding_attention", "full_attention", "sliding_attention"],
             layer_rope_theta=[1e4, 1e4, 0], rope_parameters={"rope_type": "default", "rope_theta": 1e4},
             attention_bias=True, rms_norm_eps=1e-6, post_norm_eps=0.05, qk_scale_factor=3.87,
             output_multiplier=0.7, final_logit_softcapping=3.0, bos_token_id=None)
_SPARK = dict(mlp_layer_types=["dense", "sparse", "sparse"], num_local_experts=4, num_experts_per_tok=2,
              moe_intermediate_size=32, moe_hidden_size=48, routed_scaling_factor=1.5, residual_gate_temperature=0.5)
_SPARK_AUDIO = dict(patch_sizes=[4, 2], hidden_sizes=[16, 32], depths=[1, 1], num_hidden_layers=2, out_hidden_size=64)


def make_muse(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = muse_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=MUSE[name])


def muse_config(name: str, vocab: int, eos: int, pad: int):
    from tiny_vl_text_models import multimodal_config

    model_type = name.removesuffix("_tied")
    text = dict(_TEXT, model_type=f"{model_type}_text", vocab_size=vocab, eos_token_id=eos, pad_token_id=pad,
                tie_word_embeddings=True)
    changes = dict(projector_hidden_size=64, out_hidden_size=64, image_token_id=IMAGE_ID, video_token_id=VIDEO_ID)
    if name == "muse_glimmer_tied":
        changes.update(tie_word_embeddings=True)
    if name == "muse_spark":
        text.update(_SPARK)
        changes.update(audio_token_id=AUDIO_ID, audio_config=_SPARK_AUDIO)
    return multimodal_config(model_type, text, changes)
