"""Tiny HF configs of Cohere 2, CWM, Jais 2, HyperCLOVA X and DiffLlama (tiny_models.py builds and saves them), each with what
sets it apart binding on the test prompts (26 tokens)."""

ARCHS = ("cohere2", "cwm", "jais2", "hyperclovax", "diffllama")
# in the common checks (tiny_models.FAMILY_ARCHS); CWM (Ministral's layer and windows) and Jais 2 (Nemotron's layer
# with StarCoder2's LayerNorms) run on paths those checks cover already: prefill and decode in test_more_dense_families
COMMON_CHECK_ARCHS = ("cohere2", "hyperclovax", "diffllama")


def config_class(name: str):
    """transformers' config class `name`; the test is skipped where this transformers has none (older than the
    family)."""
    import pytest
    import transformers

    cls = getattr(transformers, name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return cls


def more_dense_config(arch: str, common: dict):
    """common: tiny_models' shared fields (64 hidden, 4 heads of 16, 2 KV heads, 256 positions)."""
    common = {k: v for k, v in common.items() if k != "rms_norm_eps"}
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if arch == "cohere2":  # sliding (window 6, rope), full (no rope), sliding; interleaved rope, logits x 4, tied, biases
        types = ["sliding_attention", "full_attention", "sliding_attention"]
        return config_class("Cohere2Config")(num_hidden_layers=3, sliding_window=6, layer_types=types,
                                             layer_norm_eps=1e-5, logit_scale=4.0, attention_bias=True,
                                             tie_word_embeddings=True, rope_parameters=rope, **common)
    if arch == "cwm":  # full, sliding, sliding (window 6, its default pattern); llama3 rope from 32; MLP biases; untied
        llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 32, "rope_theta": 10000.0}
        return config_class("CwmConfig")(num_hidden_layers=3, sliding_window=6, mlp_bias=True, rms_norm_eps=1e-5,
                                         head_dim=16, tie_word_embeddings=False, rope_parameters=llama3,
                                         **{**common, "bos_token_id": 0})
    if arch == "jais2":  # LayerNorms with biases, relu^2 MLP with biases, biases on q/k/v/o, untied
        return config_class("Jais2Config")(num_hidden_layers=2, layer_norm_eps=1e-5, hidden_act="relu2",
                                           attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                                           rope_parameters=rope, **common)
    if arch == "hyperclovax":  # post-norms, Granite's multipliers far from 1, logits x 4, biases on q/k/v/o, tied
        return config_class("HyperCLOVAXConfig")(num_hidden_layers=3, rms_norm_eps=1e-5, use_post_norm=True,
                                                 embedding_multiplier=6.0, residual_multiplier=0.3,
                                                 attention_multiplier=0.7, logits_scaling=4.0, attention_bias=True,
                                                 tie_word_embeddings=True, rope_parameters=rope, **common)
    if arch == "diffllama":  # 8 query heads of 8 dims over 4 KV heads (2 per value half), biases on q/k/v/o
        heads = dict(num_attention_heads=8, num_key_value_heads=4)
        return config_class("DiffLlamaConfig")(num_hidden_layers=2, rms_norm_eps=1e-5, attention_bias=True,
                                               tie_word_embeddings=False, rope_parameters=rope, **{**common, **heads})
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {ARCHS}")
