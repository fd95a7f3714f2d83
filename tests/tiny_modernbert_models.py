"""Tiny HF configs of the ModernBERT decoder (tiny_models.py builds and saves them): 3 layers, hidden 64, 4 heads, an
MLP of 96; layers 0 and 2 full, layer 1 sliding (global_attn_every_n_layers=2) with local_attention 12 (HF's window:
6 tokens, binding on the 26-token test prompts); rope bases 1000 (full) and 100 (sliding).  "modernbert_decoder":
biases on every norm, q/k/v/o, the MLP, the head's dense and the decoder, a relu head over a gelu MLP, tied;
"modernbert_decoder_plain": HF's defaults (no norm, attention, MLP or head bias, gelu head) with the decoder bias off
and an lm head of its own."""

from tiny_more_models import TINY_MODERNBERT_ARCHS


def modernbert_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import ModernBertDecoderConfig

    ropes = {"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
             "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
    common = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                  max_position_embeddings=256, global_attn_every_n_layers=2, local_attention=12, norm_eps=1e-5,
                  rope_parameters=ropes, eos_token_id=eos, pad_token_id=pad, bos_token_id=eos, cls_token_id=eos,
                  sep_token_id=eos, architectures=["ModernBertDecoderForCausalLM"])
    if arch == "modernbert_decoder":
        return ModernBertDecoderConfig(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                                       decoder_bias=True, hidden_activation="gelu", classifier_activation="relu",
                                       tie_word_embeddings=True, **common)
    if arch == "modernbert_decoder_plain":
        return ModernBertDecoderConfig(decoder_bias=False, tie_word_embeddings=False, **common)
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {TINY_MODERNBERT_ARCHS}")
