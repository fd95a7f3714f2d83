"""Tiny Gemma 3n models for tiny_models.make_tiny_model, each feature set far from neutral.

gemma3n: 5 layers [sliding, sliding, full, sliding, full] (window 6), the last two reusing the KV of layers 1 and 2
(num_kv_shared_layers 2); 3 AltUp streams, the active one stream 1; LAuReL of rank 8; MLP widths 48, 64, 32, 48, 40
with the first two gates sparsified (0.95, 0.6); per-layer inputs of width 8 over a per-layer vocabulary smaller
than the vocabulary (ids past it read row 0); rope bases 100 (sliding) and 1000 (full); logits soft-capped at 3;
tied.
gemma3n_mm: gemma3n's text model inside Gemma3nForConditionalGeneration, the last 60 ids its vision and audio
embedders' (30 each, widths 16 and 24); with a small audio tower and, where timm
(which builds HF's vision tower) is not installed, the vision tower stubbed out: text prompts never reach it.
"""

SLIDING, FULL = "sliding_attention", "full_attention"


def gemma3n_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import Gemma3nTextConfig

    text = Gemma3nTextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=[48, 64, 32, 48, 40], num_hidden_layers=5,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, eos_token_id=eos,
        pad_token_id=pad, bos_token_id=None, max_position_embeddings=256, sliding_window=6,
        layer_types=[SLIDING, SLIDING, FULL, SLIDING, FULL], num_kv_shared_layers=2,
        rope_parameters={SLIDING: {"rope_type": "default", "rope_theta": 100.0},
                         FULL: {"rope_type": "default", "rope_theta": 1000.0}},
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=vocab - 40, altup_num_inputs=3, altup_active_idx=1,
        laurel_rank=8, activation_sparsity_pattern=[0.95, 0.6, 0.0, 0.0, 0.0], final_logit_softcapping=3.0,
        tie_word_embeddings=True)
    if arch == "gemma3n":
        text.architectures = ["Gemma3nForCausalLM"]
        return text
    from transformers import Gemma3nAudioConfig, Gemma3nConfig, Gemma3nVisionConfig

    _stub_vision_tower_without_timm()

    vision = Gemma3nVisionConfig(hidden_size=16, vocab_size=30, vocab_offset=vocab - 60, rms_norm_eps=1e-6)
    audio = Gemma3nAudioConfig(hidden_size=24, vocab_size=30, vocab_offset=vocab - 30, conf_num_hidden_layers=1,
                               conf_num_attention_heads=2, sscp_conv_channel_size=(4, 4))
    config = Gemma3nConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), audio_config=audio.to_dict())
    config.architectures = ["Gemma3nForConditionalGeneration"]
    return config


def _stub_vision_tower_without_timm() -> None:
    """Without timm, HF's Gemma3nModel cannot build its vision tower (a timm model): build an empty module in its
    place (in this process; the checkpoint then has no vision tower weights)."""
    import importlib.util

    if importlib.util.find_spec("timm") is not None:
        return
    import torch
    from transformers.models.gemma3n import modeling_gemma3n

    auto = modeling_gemma3n.AutoModel
    if getattr(auto, "stubs_vision", False):
        return

    class AutoModelWithoutVision:
        stubs_vision = True

        @staticmethod
        def from_config(config, **kwargs):
            if config.model_type == "gemma3n_vision":
                return torch.nn.Module()
            return auto.from_config(config, **kwargs)

    modeling_gemma3n.AutoModel = AutoModelWithoutVision
