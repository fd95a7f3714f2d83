"""Tiny vision-language models of group VL3 served for text (runtime/models/multimodal_wrappers.py), each the WHOLE
conditional-generation model saved by transformers: Inkling's, Inkling 2's and Inkling 2 Loop's (tiny_inkling_models'
text models, Inkling's audio tower too) and Hy V4 VL's (tiny_dsv4_models' hy_v4 with M-RoPE sections and a latent
norm eps of rms_norm_eps), their vision side shrunk (tiny_vl_text_models.multimodal_config).

make_vl3(tmp_path_factory, name) -> Path, name one of VL3.
"""

from tiny_models import _hf_config, make_tiny_tokenizer, save_tiny_model

# model_type -> (tiny_models' text arch under it, the seed of its weights)
VL3 = {"inkling_mm_model": ("inkling", 4100), "inkling2": ("inkling2", 4101), "inkling2_loop": ("inkling2_loop", 4102),
       "hy_v4_vl": ("hy_v4", 4103)}
_CHANGES = {   # text_config fields (text), vision_config fields (vision), the config's own
    # Inkling: a vision layer per scale of its patches (fewer take scipy), 4 mel bins of 8 values
    "inkling_mm_model": dict(vision=dict(hidden_size=32, patch_size=2, temporal_patch_size=2, num_channels=1,
                                         n_layers=3), audio_config=dict(n_mel_bins=4, mel_vocab_size=8)),
    "inkling2": dict(vision=dict(patch_size=4, text_hidden_size=32)),
    "inkling2_loop": dict(vision=dict(patch_size=4, text_hidden_size=32)),
    # rms_norm_eps large enough that its latent norms' eps (HF: rms_norm_eps, not Hy V4's 1e-6) shows
    "hy_v4_vl": dict(text=dict(rms_norm_eps=0.1, rope_parameters=dict(rope_type="default", rope_theta=1e4,
                                                                      mrope_section=[2, 1, 1]))),
}


def make_vl3(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = vl3_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=VL3[name][1])


def vl3_config(name: str, vocab: int, eos: int, pad: int):
    import copy

    from tiny_vl_text_models import multimodal_config

    text = _hf_config(VL3[name][0], vocab, eos, pad).to_dict()
    return multimodal_config(name, text, copy.deepcopy(_CHANGES[name]))
