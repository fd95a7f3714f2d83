"""Tiny random vision-language models (Gemma 3, Mistral 3 with a Mistral and a Ministral 3 language model, LLaVA
over Qwen2, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE), each saved by transformers as a loadable HF folder.

make_multimodal(tmp_path_factory, name) -> Path.  The language models are tests/tiny_models.py's (every weight
random), with what each family changes binding: Qwen's M-RoPE sections, Ministral 3's YaRN; the vision towers
are one layer of width 32, enough for HF to build them and for their weights to be in the checkpoint.
"""

from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model

MULTIMODAL = ("gemma3_mm", "mistral3", "ministral3_mm", "llava", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
_QWEN_VISION = dict(depth=1, hidden_size=32, num_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2)


def make_multimodal(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    ids = dict(vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    config = _config(name, **ids)
    config.architectures = [type(config).__name__.replace("Config", "ForConditionalGeneration")]
    return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=2000 + MULTIMODAL.index(name))


def _config(name: str, vocab: int, eos: int, pad: int):
    from transformers import (
        CLIPVisionConfig,
        Gemma3Config,
        LlavaConfig,
        Mistral3Config,
        PixtralVisionConfig,
        SiglipVisionConfig,
    )

    if name == "gemma3_mm":  # tiny_models' gemma3 (windows of 6, a local rope base); 4 x 4 patches pooled to 4
        text = _hf_config("gemma3", vocab, eos, pad)
        return Gemma3Config(text_config=text.to_dict(), mm_tokens_per_image=4, eos_token_id=eos,
                            vision_config=SiglipVisionConfig(image_size=16, patch_size=4, **_VISION).to_dict(),
                            tie_word_embeddings=True)
    pixtral = PixtralVisionConfig(image_size=16, patch_size=4, head_dim=16, **_VISION).to_dict()
    if name == "mistral3":  # Mistral Small 3.1's shape: a Mistral language model (multi-query, window 16), untied
        text = _hf_config("mistral", vocab, eos, pad)
        text.tie_word_embeddings = False
        return Mistral3Config(text_config=text.to_dict(), vision_config=pixtral, tie_word_embeddings=False)
    if name == "ministral3_mm":  # Ministral 3: YaRN x16 from 64 (its llama-4 query scaling from position 64 on)
        return Mistral3Config(text_config=_ministral3(vocab, eos, pad).to_dict(), vision_config=pixtral,
                              tie_word_embeddings=True)
    if name == "llava":  # over tiny_models' qwen2 (q/k/v bias, linear rope x2), tied at the top level
        text = _hf_config("qwen2", vocab, eos, pad)
        return LlavaConfig(text_config=text.to_dict(), tie_word_embeddings=True, image_seq_length=4,
                           vision_config=CLIPVisionConfig(image_size=16, patch_size=8, **_VISION).to_dict())
    return _qwen_vl_config(name, vocab, eos, pad)


def _ministral3(vocab: int, eos: int, pad: int):
    from transformers import Ministral3Config

    return Ministral3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                            eos_token_id=eos, pad_token_id=pad, bos_token_id=None, tie_word_embeddings=True,
                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                             "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                             "llama_4_scaling_beta": 0.1, "max_position_embeddings": 1024})


def _qwen_vl_config(name: str, vocab: int, eos: int, pad: int):
    """Qwen2-VL and Qwen2.5-VL over a Qwen2 layer (q/k/v bias, head_dim 16, M-RoPE sections 2 + 3 + 3), untied;
    Qwen3-VL over a Qwen3 layer (q/k norms, head_dim 32, interleaved sections 6 + 5 + 5), tied; Qwen3-VL-MoE the
    same with 8 experts of width 16 (top 2) on layer 0 and a dense layer 1 (mlp_only_layers), untied."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig, Qwen3VLMoeConfig

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                  max_position_embeddings=256)
    if name.startswith("qwen3_vl"):
        text = dict(common, head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "mrope_section": [6, 5, 5], "mrope_interleaved": True})
        vision = dict(_QWEN_VISION, intermediate_size=64, out_hidden_size=64, num_position_embeddings=16,
                      deepstack_visual_indexes=[0])
        if name == "qwen3_vl":
            return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True)
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=[1])
        return Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    text = dict(common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    if name == "qwen2_vl":
        vision = dict(_QWEN_VISION, embed_dim=32, mlp_ratio=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
    vision = dict(_QWEN_VISION, intermediate_size=64, out_hidden_size=64, window_size=8, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)
