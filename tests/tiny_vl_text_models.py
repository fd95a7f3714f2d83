"""Tiny random vision-language models served for text (runtime/models/multimodal_wrappers.py), each the WHOLE
conditional-generation model saved by transformers: the language model one of tiny_models' (every difference of
its family binding), the vision side its config class's default shrunk to one narrow layer.

make_vl_text(tmp_path_factory, name) -> Path, name a VL_TEXT model_type.
"""

from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model

# each config's model_type -> tiny_models' text arch under it (the weight seed: 3000 + the index here)
VL_TEXT = {
    "llava_next": "llama", "llava_next_video": "llama", "llava_onevision": "qwen2", "llava_onevision1_5": "qwen3",
    "vipllava": "llama", "video_llava": "llama", "internvl": "qwen2", "lighton_ocr": "qwen3", "aya_vision": "cohere2",
    "cohere2_vision": "cohere2", "idefics2": "mistral", "idefics3": "llama", "smolvlm": "llama", "exaone4_5": "exaone4",
    "got_ocr2": "qwen2", "lfm2_vl": "lfm2", "ovis2": "qwen2", "qianfan_ocr": "qwen3", "video_llama_3": "qwen2",
    "hyperclovax_vision_v2": "hyperclovax", "deepseek_vl": "llama", "kimi_k25": "deepseek_v3", "minicpmv4_6": "qwen3_5",
    "minicpmv4_7": "qwen3_5", "minicpm_ocr": "qwen3_5", "granite_docling": "granite", "granite4_vision": "granite",
    "ovis2_5": "qwen3", "lfm3_vl": "lfm3", "deepseek_vl_hybrid": "llama", "janus": "llama", "hunyuan_vl": "hunyuan",
    "nemotron_h_omni": "nemotron_h", "glm4v": "glm4", "glm_ocr": "glm4", "paddleocr_vl": "llama", "glm46v": "glm4",
    "glm4v_moe": "glm4_moe", "qwen2_5_omni_thinker": "qwen2", "qwen3_omni_moe_thinker": "qwen3_moe",
    "fuyu": "persimmon", "cosmos3_omni": "qwen3",
}
_TINY_AUDIO = dict(encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, d_model=32, output_dim=64)


def _mrope(section, rope_type="default", **rope):
    """text_config changes: the tiny text model's rope with M-RoPE sections (plain rope for text)."""
    return dict(text=dict(rope_parameters=dict(rope_type=rope_type, rope_theta=1e4, mrope_section=section, **rope)))


_GLM_ROPE = dict(partial_rotary_factor=0.5)   # half of each head rotating
# what each model changes in its config: text_config fields (text), vision_config fields (vision), its own
_CHANGES = {
    # Granite 4 Vision: its Q-Former is as wide as the vision tower, in heads of 64; one deepstack, four spatial targets
    "granite4_vision": dict(vision=dict(hidden_size=64), deepstack_layer_map=[[0, 0]],
                            spatial_target_layers=[0, 1, 0, 1], downsample_rate="2/4"),
    "hunyuan_vl": _mrope([2, 3, 3], "dynamic", alpha=50.0, factor=1.0),   # tiny_models' NTK-alpha rope
    # GLM-4.1V/4.6V: heads of hidden / heads (16); GLM-OCR and GLM-4.5V: tiny_models' head_dim 32
    "glm4v": {"text": dict(head_dim=16, **_mrope([1, 1, 2], **_GLM_ROPE)["text"])},
    "glm46v": {"text": dict(head_dim=16, **_mrope([1, 1, 2], **_GLM_ROPE)["text"])},
    "glm_ocr": _mrope([2, 3, 3], **_GLM_ROPE), "glm4v_moe": _mrope([2, 3, 3], **_GLM_ROPE),
    "paddleocr_vl": {"text": dict(use_bias=True, **_mrope(  # biases on every projection, tiny llama's llama3 rope
        [2, 3, 3], "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=32)["text"])},
    "nemotron_h_omni": dict(vision_hidden_size=32, projector_hidden_size=64,   # a RADIO tower of 32
                            vision=dict(max_img_size=64, image_size=32)),
    "ovis2": dict(hidden_size=64, vision=dict(vocab_size=64)),   # its visual vocabulary's table [V, H]
    "deepseek_vl_hybrid": dict(high_res_vision_config=dict(  # its SAM tower
        hidden_size=32, output_channels=16, num_hidden_layers=1, num_attention_heads=2, mlp_dim=64,
        global_attn_indexes=[0], image_size=64, num_pos_feats=16)),
    "janus": dict(vision=dict(projection_dim=64), vq_config=dict(  # its image generation side, groups of 32
        num_embeddings=64, base_channels=32, channel_multiplier=[1, 1], latent_channels=32, projection_dim=64,
        image_token_embed_dim=64, embed_dim=8, num_res_blocks=1)),
    "qwen2_5_omni_thinker": dict(_mrope([2, 3, 3]), vision=dict(fullatt_block_indexes=[0]), audio_config=_TINY_AUDIO),
    "qwen3_omni_moe_thinker": dict(_mrope([6, 5, 5], mrope_interleaved=True),
                                   vision=dict(deepstack_visual_indexes=[0], num_position_embeddings=16),
                                   audio_config=dict(_TINY_AUDIO, downsample_hidden_size=32)),
    "cosmos3_omni": dict(_mrope([6, 5, 5], mrope_interleaved=True),   # Qwen3-VL's text model and vision tower
                         vision=dict(deepstack_visual_indexes=[0], num_position_embeddings=16)),
}
# the vision config's sizes, where it has the field: one layer of width 32
_TINY_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_heads=2,
                    depth=1, embed_dim=32, out_hidden_size=64, num_key_value_heads=2, head_dim=16)


def make_vl_text(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = vl_text_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=3000 + list(VL_TEXT).index(name))


def vl_text_config(name: str, vocab: int, eos: int, pad: int):
    return multimodal_config(name, _hf_config(VL_TEXT[name], vocab, eos, pad).to_dict(), dict(_CHANGES.get(name, {})))


def multimodal_config(name: str, text: dict, changes: dict):
    """The config of model_type `name` over the text config `text`, its vision config shrunk, `changes` made."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    config_class = CONFIG_MAPPING[name]
    default = config_class()
    text.update(changes.pop("text", {}))
    if default.text_config.model_type.endswith("_text") and default.text_config.model_type != text["model_type"]:
        del text["model_type"]   # the same fields in the checkpoint's own text config class (Granite Docling's)
    kwargs = dict(text_config=text)
    vision = getattr(default, "vision_config", None)
    if vision is not None:
        vision = vision.to_dict()
        kwargs["vision_config"] = {**vision, **{k: v for k, v in _TINY_VISION.items() if k in vision},
                                   **changes.pop("vision", {})}
        if "layer_types" in vision:   # one per layer left
            layers = kwargs["vision_config"]["num_hidden_layers"]
            kwargs["vision_config"]["layer_types"] = vision["layer_types"][:layers]
    config = config_class(**kwargs, **changes)
    config.architectures = [MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[name]]
    return config
