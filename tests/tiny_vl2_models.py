"""More tiny vision-language models served for text (runtime/models/multimodal_wrappers.py; tiny_vl_text_models.py
has the first ones), each the WHOLE conditional-generation model saved by transformers, its vision side shrunk.

Llama 3.2 Vision (mllama): tiny_models' llama (llama3 rope, untied) with 4 layers, the second a cross-attention
layer (its weights random like the rest: running it would move the logits); its text model alone (mllama_text),
whose config says tied though HF never ties it.

make_vl2(tmp_path_factory, name) -> Path, name one of VL2.
"""

from tiny_models import make_tiny_tokenizer, save_tiny_model

# name -> the seed of its weights
VL2 = {"mllama": 4000, "mllama_text": 4001}


def make_vl2(tmp_path_factory, name: str):
    tok = make_tiny_tokenizer()
    config = vl2_config(name, vocab=len(tok), eos=tok.eos_token_id, pad=tok.convert_tokens_to_ids("<|endoftext|>"))
    return save_tiny_model(tmp_path_factory, config, f"tiny-{name}", tok, seed=VL2[name])


def vl2_config(name: str, vocab: int, eos: int, pad: int):
    import transformers

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
    raise ValueError(f"unknown tiny vision-language model {name!r}; choose from {tuple(VL2)}")
