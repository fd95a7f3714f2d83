"""Tiny Mistral Large 4 (MistralLarge4ForConditionalGeneration, group MLARGE4), served for text prompts
(runtime/models/mistral_large4.py): its Pixtral tower shrunk (tiny_vl_text_models.multimodal_config), its language
model 4 layers of 4 heads: latent rank 32, no low-rank query, 24 nope and 8 rope head dims, values of 16; layers 1
and 3 NoPE; layer 2 reuses layer 0's latent KV and layer 3 layer 1's (HF's rule: the last earlier sharing layer of
its kind); YaRN x16 from 8 positions; layer 0 dense, the others 8 experts of width 24 in 4 groups (2 compete), top 2
of the float32 softmax renormalised, times 2.5, one shared expert; logits soft-capped at 2.
index_topk 128 (the served context).

make_mlarge4(tmp_path_factory) -> Path: tiny_models' random weights, then every attention softmax_scaling bias plus 1
(a query factor near 1 + scale * log(position + 1) rather than near 0, which would flatten every attention).
"""

from safetensors.torch import load_file, save_file

TINY_MLARGE4 = "mistral_large4"
_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
             kv_lora_rank=32, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=16, moe_intermediate_size=24,
             n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
             routed_scaling_factor=2.5, first_k_dense_replace=1, index_topk=128, index_head_dim=16, index_n_heads=2,
             max_position_embeddings=256, no_rope_layers=[1, 0, 1, 0], kv_source_layers=[0, 1, 0, 1],
             final_logit_softcapping=2.0, rms_norm_eps=1e-5,
             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                              "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
                              "attention_factor": 1.0})


def mlarge4_config(arch: str, vocab: int, eos: int, pad: int):
    from tiny_vl_text_models import multimodal_config
    from transformers import MistralLarge4TextConfig

    fields = dict(_TEXT, vocab_size=vocab, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    return multimodal_config("mistral_large4", MistralLarge4TextConfig(**fields).to_dict(), {})


def make_mlarge4(tmp_path_factory):
    from tiny_models import make_tiny_model

    path = make_tiny_model(tmp_path_factory, TINY_MLARGE4)
    weights = load_file(str(path / "model.safetensors"))
    for name in weights:
        if name.endswith("attention.ssmax_scaling.b"):   # Mistral's name, as transformers saves it
            weights[name] += 1.0
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
