"""More tiny vision-language models served for text (runtime/models/multimodal_wrappers.py; tiny_vl_text_models.py
has the first ones), each the WHOLE conditional-generation model saved by transformers, its vision side shrunk.

Llama 3.2 Vision (mllama): tiny_models' llama (llama3 rope, untied) with 4 layers, the second a cross-attention
layer (its weights random like the rest: running it would move the logits); its text model alone (mllama_text),
whose config says tied though HF never ties it.  Apertus 1.5 and Gemma 4 Unified: tiny_newtext_models' text models.
ERNIE 4.5 VL: text and vision experts (_ernie_vl_text).  Aria, Cohere Compass, Emu3 (tiny_newtext_models'), Qwen4-Exp
(tiny_linear_models') and Dots 3 Note (tiny_dsv4_models'): their tiny text models with tiny_vl_text_models' shrunk
vision side (_IMAGE_SIDES: Emu3's and Dots 3 Note's own).

make_vl2(tmp_path_factory, name) -> Path, name one of VL2.
"""

import contextlib

from tiny_models import make_tiny_tokenizer, save_tiny_model

# name -> the seed of its weights
VL2 = {"mllama": 4000, "mllama_text": 4001, "apertus1p5": 4002, "gemma4_unified": 4003, "ernie4_5_vl_moe": 4004,
       "aria": 4005, "cohere_compass": 4006, "qwen4_exp": 4007, "emu3": 4008,
       "dots3_note": 4009}
# over a text model of tiny_models' (tiny_vl_text_models.multimodal_config): its tiny arch
_OVER_TEXT = {"aria": "aria_text", "cohere_compass": "cohere_compass", "qwen4_exp": "qwen4_exp", "emu3": "emu3",
              "dots3_note": "dots3_note"}
# whose model_type tiny_models builds as the text model alone (hf_auto_class): built and read as image-text-to-text here
BUILT_AS_TEXT_MODEL = ("emu3", "dots3_note")
# tiny_newtext_models' text model under each, the tokenizer side shrunk: Apertus 1.5's VQ image tokenizer and
# WavTokenizer audio encoder, Gemma 4 Unified's patch and audio-frame embedders
_TOKENIZERS = {
    "apertus1p5": dict(vision_config=dict(codebook_size=8, embed_dim=8, latent_channels=32, base_channels=32,
                                          channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[]),
                       audio_config=dict(num_filters=8, upsampling_ratios=[2, 2], hidden_size=32, codebook_size=8,
                                         codebook_dim=32, num_lstm_layers=1, decoder_hidden_size=32,
                                         decoder_intermediate_size=64, decoder_num_layers=1,
                                         decoder_attention_num_groups=8)),
    "gemma4_unified": dict(vision_config=dict(mm_embed_dim=32, mm_posemb_size=16, output_proj_dims=32, patch_size=4),
                           audio_config=dict(audio_embed_dim=32)),
}

_ERNIE_VL_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14)


def _ernie_vl_text(vocab: int, eos: int, pad: int) -> dict:
    """tiny_models' ernie4_5_moe with text experts of 32 and vision experts of 16 (4 each, top 2, one shared) in
    layers 1 and 3 of 4, M-RoPE sections [3, 3, 2] of its 8 frequencies."""
    return dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, moe_intermediate_size=[32, 16], moe_k=2, moe_num_experts=4,
                moe_num_shared_experts=1, mlp_layer_types=["dense", "sparse", "dense", "sparse"], rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [3, 3, 2]},
                eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                tie_word_embeddings=False)


def _emu3_image_side(vocab: int) -> dict:
    """Emu3's VQ-VAE of 32 channels, 8 codes, the last 9 ids of the vocabulary: its codes and end of line."""
    codes = {f"<|visual token {i:06d}|>": vocab - 9 + i for i in range(8)}
    return dict(vocabulary_map={**codes, "<|extra_200|>": vocab - 1}, vq_config=dict(
        codebook_size=8, base_channels=32, channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[],
        hidden_size=32, temporal_downsample_factor=2))


def _special_ids(name: str, vocab: int) -> dict:
    """Apertus 1.5: its image and audio codes the 16 rows past the vocabulary; Gemma 4 Unified: its image, video
    and audio placeholders the vocabulary's last three ids (which HF's text path embeds as the pad)."""
    if name == "apertus1p5":
        return dict(image_token_offset=vocab, audio_token_offset=vocab + 8, image_token_id=vocab - 2,
                    audio_token_id=vocab - 1)
    return dict(image_token_id=vocab - 1, video_token_id=vocab - 2, audio_token_id=vocab - 3)


_IMAGE_SIDES = {   # the multimodal config's own changes, given the vocabulary size
    "emu3": _emu3_image_side,
    "dots3_note": lambda vocab: dict(   # a dense vision tower layer (its MoE's: later layers), one audio layer
        vision=dict(mlp_layer_types=["dense"], per_layer_config={}, adapter_in_dim=32, adapter_out_dim=64, moe_intermediate_size=32,
                    num_local_experts=2), audio_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            head_dim=16, downsample_hidden_size=16, adapter_input_size=32, adapter_out_dim=64, conv_output_size=64),
        image_token_id=vocab - 1, video_token_id=vocab - 2, audio_token_id=vocab - 3),
}


def make_vl2(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = vl2_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    with image_text_to_text(name):
        return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=VL2[name])


@contextlib.contextmanager
def image_text_to_text(name: str):
    """tiny_models.hf_auto_class giving AutoModelForImageTextToText meanwhile, where `name` is BUILT_AS_TEXT_MODEL."""
    import tiny_models
    from transformers import AutoModelForImageTextToText

    own = tiny_models.hf_auto_class
    if name in BUILT_AS_TEXT_MODEL:
        tiny_models.hf_auto_class = lambda model_type: AutoModelForImageTextToText
    try:
        yield
    finally:
        tiny_models.hf_auto_class = own


def vl2_config(name: str, vocab: int, eos: int, pad: int):
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if name in ("mllama", "mllama_text"):
        text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, num_hidden_layers=4, cross_attention_layers=[1], rms_norm_eps=1e-5,
                    eos_token_id=eos, pad_token_id=pad, bos_token_id=eos, max_position_embeddings=256,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 32})
        if name == "mllama_text":
            config = transformers.MllamaTextConfig(**text, tie_word_embeddings=True)
            config.architectures = ["MllamaForCausalLM"]
            return config
        vision = dict(hidden_size=32, attention_heads=2, intermediate_size=64, num_hidden_layers=1,
                      num_global_layers=1, intermediate_layers_indices=[0], vision_output_dim=64, image_size=28,
                      patch_size=14)
        config = transformers.MllamaConfig(text_config=text, vision_config=vision, image_token_index=vocab)
        config.architectures = ["MllamaForConditionalGeneration"]
        return config
    if name == "ernie4_5_vl_moe":
        special = dict(image_token_id=vocab - 1, video_token_id=vocab - 2, image_start_token_id=vocab - 3,
                       image_end_token_id=vocab - 4, video_start_token_id=vocab - 5, video_end_token_id=vocab - 6)
        config = transformers.Ernie4_5_VLMoeConfig(text_config=_ernie_vl_text(vocab, eos, pad),
                                                   vision_config=_ERNIE_VL_VISION, tie_word_embeddings=False, **special)
        config.architectures = ["Ernie4_5_VLMoeForConditionalGeneration"]
        return config
    if name in _OVER_TEXT:
        from tiny_models import _hf_config
        from tiny_vl_text_models import multimodal_config

        text = _hf_config(_OVER_TEXT[name], vocab, eos, pad)
        return multimodal_config(name, getattr(text, "text_config", text).to_dict(),   # Emu3's is multimodal
                                 _IMAGE_SIDES.get(name, lambda vocab: {})(vocab))
    if name in _TOKENIZERS:
        from tiny_newtext_models import newtext_config

        text = newtext_config(name, vocab, eos, pad).to_dict()
        config = transformers.CONFIG_MAPPING[name](text_config=text, **_TOKENIZERS[name], **_special_ids(name, vocab))
        config.architectures = [MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[name]]
        return config
    raise ValueError(f"unknown tiny vision-language model {name!r}; choose from {tuple(VL2)}")
