"""Tiny vision-language models served for text (runtime/models/multimodal_wrappers.py, molmo2_text.py), group VL4:
each the WHOLE conditional-generation model saved by transformers (its released weight names), its vision side
shrunk (tiny_vl_text_models.multimodal_config).

Cosmos 3 Edge (cosmos3_edge): tiny_models' arcee (relu^2 MLP, biases on the attention) with mlp_bias, M-RoPE
sections of its 8 frequencies, a top-level tie_word_embeddings that HF's model ignores.  Molmo2: tiny_models' qwen3
without its attention bias (molmo2, qk_norm_type "qwen3") and tiny_models' olmo2 (molmo2_olmo, "olmo" with
norm_after), each with 8 additional vocabulary rows.  Chameleon: Llama's sizes with every bias (attention, MLP), 8
image tokens (vocabulary ids 100-107) whose lm head rows are scaled up so that, unmasked, they win (image_tokens
_first), its VQ tokenizer of 32 channels; chameleon_swin the same with swin_norm.  DeepSeek-OCR 2: Llama's attention
with biases, a dense layer then two of 4 experts (top 2 in the best of 2 groups, times 2.5) and a shared expert, its
SAM and Qwen2 towers one layer of 32.

make_vl4(tmp_path_factory, name) -> Path, name one of VL4.
"""

from safetensors.torch import load_file, save_file
from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model

# name -> (model_type, tiny_models' text arch under it, the seed of its weights)
VL4 = {"cosmos3_edge": ("cosmos3_edge", "arcee", 4100), "molmo2": ("molmo2", "qwen3", 4101),
       "molmo2_olmo": ("molmo2", "olmo2", 4102), "chameleon": ("chameleon", None, 4103),
       "chameleon_swin": ("chameleon", None, 4104), "deepseek_ocr2": ("deepseek_ocr2", None, 4105)}
IMAGE_TOKENS = range(100, 108)
_MOLMO2_ADAPTER = dict(vision_feature_layer=[0], hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                       head_dim=16, intermediate_size=64, text_hidden_size=64)
_CHANGES = {   # text_config fields (text) and the multimodal config's own
    "cosmos3_edge": dict(text=dict(mlp_bias=True, rope_parameters=dict(rope_type="default", rope_theta=1e4,
                                                                       mrope_section=[3, 3, 2])),
                         projector_hidden_size=64, tie_word_embeddings=True),
    "molmo2": dict(text=dict(attention_bias=False, additional_vocab_size=8), adapter_config=_MOLMO2_ADAPTER),
    "molmo2_olmo": dict(text=dict(qk_norm_type="olmo", norm_after=True, additional_vocab_size=8),
                        adapter_config=_MOLMO2_ADAPTER),
}


def make_vl4(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = vl4_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    path = save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=VL4[name][2])
    return _image_tokens_first(path) if VL4[name][0] == "chameleon" else path


def _image_tokens_first(path):
    """The checkpoint at `path` with its image tokens' lm head rows times 8."""
    weights = load_file(str(path / "model.safetensors"))
    weights["lm_head.weight"][list(IMAGE_TOKENS)] *= 8
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def vl4_config(name: str, vocab: int, eos: int, pad: int):
    from tiny_vl_text_models import multimodal_config

    model_type, text_arch, _ = VL4[name]
    if model_type == "chameleon":
        return _chameleon(vocab, eos, pad, swin_norm=name == "chameleon_swin")
    if model_type == "deepseek_ocr2":
        return _deepseek_ocr2(vocab, eos, pad)
    changes = {k: dict(v) if isinstance(v, dict) else v for k, v in _CHANGES[name].items()}
    return multimodal_config(model_type, _hf_config(text_arch, vocab, eos, pad).to_dict(), changes)


def _chameleon(vocab: int, eos: int, pad: int, swin_norm: bool):
    from transformers import ChameleonConfig

    names = {"<image>": 99, **{f"IMGIMG{chr(ord('A') + i - 100)}Z": i for i in IMAGE_TOKENS}}
    vq = dict(embed_dim=8, num_embeddings=8, latent_channels=8, resolution=32, base_channels=32,
              channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[])
    config = ChameleonConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, attention_bias=True,
                             mlp_bias=True, swin_norm=swin_norm, vocabulary_map=names, vq_config=vq,
                             eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config.architectures = ["ChameleonForConditionalGeneration"]
    return config


def _deepseek_ocr2(vocab: int, eos: int, pad: int):
    from transformers import DeepseekOcr2Config

    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, n_routed_experts=4, num_experts_per_tok=2,
                n_shared_experts=1, mlp_layer_types=["dense", "sparse", "sparse"], topk_method="group_limited_greedy",
                n_group=2, topk_group=1, routed_scaling_factor=2.5, attention_bias=True, rms_norm_eps=1e-5,
                eos_token_id=eos, pad_token_id=pad, bos_token_id=None, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    vision = dict(sam_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=1, num_attention_heads=2,
                                  mlp_dim=64, global_attn_indexes=[0], image_size=64, window_size=2,
                                  downsample_channels=[16, 32]),
                  encoder_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2))
    config = DeepseekOcr2Config(text_config=text, vision_config=vision, image_token_id=vocab - 1)
    config.architectures = ["DeepseekOcr2ForConditionalGeneration"]
    return config
