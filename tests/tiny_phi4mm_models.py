"""Tiny HF configs of Phi-4-multimodal (Phi4MultimodalForCausalLM) served for text prompts (tiny_models.py builds and
saves the whole model, its image and audio embedders shrunk): 3 layers, hidden 64, 4 heads of 16 over 2 KV heads.
"phi4mm" sets what the released checkpoints set: LongRoPE with distinct short and long factors from 32 positions of
256 (an attention factor of sqrt(1 + ln 8 / ln 32)), a partial rotary factor of 0.5, a window of 12 on every layer,
the lm head tied to the embeddings; its image and audio token ids are the vocabulary's last two.  "phi4mm_plain":
HF's defaults otherwise (default rope, no window, an lm head of its own) but 12 of the 16 dims rotated."""

_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=28,
               patch_size=14, crop_size=28)
_AUDIO = dict(hidden_size=32, intermediate_size=64, num_blocks=1, num_attention_heads=2, ext_pw_out_channel=32,
              depthwise_separable_out_channel=32, nemo_conv_channels=32, left_chunk=2, bias_max_distance=16)


def phi4mm_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import Phi4MultimodalConfig

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                  max_position_embeddings=256, architectures=["Phi4MultimodalForCausalLM"],
                  vision_config=dict(_VISION, image_token_id=vocab - 1),
                  audio_config=dict(_AUDIO, audio_token_id=vocab - 2))
    if arch == "phi4mm_plain":
        return Phi4MultimodalConfig(tie_word_embeddings=False, original_max_position_embeddings=None,
                                    rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                                     "partial_rotary_factor": 0.75}, **common)
    short = [1.0 + 0.25 * i for i in range(4)]   # 8 rotated dims of 16: 4 frequencies
    long_ = [2.0 + 0.5 * i for i in range(4)]
    return Phi4MultimodalConfig(tie_word_embeddings=True, sliding_window=12, original_max_position_embeddings=32,
                                rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                 "partial_rotary_factor": 0.5, "short_factor": short,
                                                 "long_factor": long_}, **common)
