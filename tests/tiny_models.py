"""Tiny random models (Llama family, Gemma 1/2/3, Phi-3, OLMo 2/3, Granite, SmolLM3, StarCoder2, StableLM, Phi, Cohere,
GLM-4, Ministral, Seed-OSS, ERNIE 4.5, EXAONE 4, Hunyuan, Arcee, GLM-4 (2024), Helium, Nemotron, OLMo, Apertus, the MoE
families, gpt-oss, GLM-4.5, dots.llm1, MiniMax-M2, OLMoE, Granite 3 MoE, ERNIE 4.5 MoE, Hunyuan MoE, the MLA families, the GPT
families of tiny_gpt_models.py; Cohere 2, CWM, Jais 2, HyperCLOVA X and DiffLlama from tiny_more_dense.py; the MoE, MLA
and Llama 4 configs of tiny_moe_models.py; the later groups of tiny_more_models.py) saved as loadable HF folders
(config, safetensors, tokenizer).

make_tiny_model(tmp_path_factory, arch, max_shard_size=None) -> Path builds one.  tests/conftest.py
turns it into fixtures: `tiny_model("qwen3") -> Path`, built once per session and arch;
`make_tiny(arch, max_shard_size=None) -> Path`, a fresh build each call.
Every weight (norms and biases included) is random, so a mis-mapped weight changes the logits.
"""

import torch
from tiny_d2_models import D2_COMMON_CHECK_ARCHS, TINY_D2_ARCHS
from tiny_gpt_models import TINY_GPT_ARCHS, TINY_GPT_VARIANT_ARCHS, gpt_config
from tiny_moe_models import TINY_LLAMA4_ARCHS, TINY_MLA_ARCHS, TINY_MOE_ARCHS, llama4_config, mla_config, moe_config
from tiny_more_dense import ARCHS as MORE_DENSE_ARCHS
from tiny_more_dense import COMMON_CHECK_ARCHS, more_dense_config
from tiny_more_models import (
    TINY_ALIBI_ARCHS,
    TINY_ASSEMBLED_ARCHS,
    TINY_CONV_ARCHS,
    TINY_DECODER_ARCHS,
    TINY_DSA_ARCHS,
    TINY_DSV4_ARCHS,
    TINY_ENCDEC_ARCHS,
    TINY_FALCON_ALIBI_ARCHS,
    TINY_GEMMA3N_ARCHS,
    TINY_GEMMA4_ARCHS,
    TINY_HYBRID_ARCHS,
    TINY_INKLING_ARCHS,
    TINY_LINEAR_ARCHS,
    TINY_M2_ARCHS,
    TINY_MAMBA_ARCHS,
    TINY_MINIMAXM3_ARCHS,
    TINY_MLARGE4_ARCHS,
    TINY_MODERNBERT_ARCHS,
    TINY_MOREMOE_ARCHS,
    TINY_NEWTEXT_ARCHS,
    TINY_PHI4MM_ARCHS,
    TINY_R2_ARCHS,
    TINY_RNN_ARCHS,
    TINY_ROUTED_ARCHS,
    TINY_STEP3_ARCHS,
    more_model_config,
)

TINY_ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "gemma", "olmo2", "olmo3", "granite",
              "smollm3", "starcoder2", "stablelm", "stablelm_parallel", "phi", "cohere", "glm4", "ministral", "seed_oss",
              "ernie4_5", "exaone4", "hunyuan", "arcee", "glm", "helium", "nemotron", "olmo", "apertus")
# a family's layer with one more option: their own tests (test_more_llama_like_families.py), not FAMILY_ARCHS
TINY_VARIANT_ARCHS = ("llama_mlp_bias", "vaultgemma", "nanochat")
# every family beyond the Llama family's own layer (Llama, Qwen2, Qwen3, Mistral); the GPT families (tiny_gpt_models.py)
FAMILY_ARCHS = TINY_ARCHS[4:] + TINY_GPT_ARCHS
# each arch's weight seed is 1000 + its index here: new archs go at the end, so the others keep their weights
_SEED_ORDER = TINY_ARCHS[:7] + TINY_MOE_ARCHS[:4] + TINY_ARCHS[7:] + TINY_MLA_ARCHS + TINY_MOE_ARCHS[4:]
_SEED_ORDER += TINY_VARIANT_ARCHS + TINY_LLAMA4_ARCHS + TINY_GPT_ARCHS + TINY_GPT_VARIANT_ARCHS
_SEED_ORDER += TINY_ROUTED_ARCHS + TINY_HYBRID_ARCHS
# Cohere 2, CWM, Jais 2, HyperCLOVA X, DiffLlama (tiny_more_dense.py): dense families seeded after all the others
TINY_ARCHS += MORE_DENSE_ARCHS
FAMILY_ARCHS += COMMON_CHECK_ARCHS
_SEED_ORDER += MORE_DENSE_ARCHS + TINY_ASSEMBLED_ARCHS
_SEED_ORDER += TINY_CONV_ARCHS
_SEED_ORDER += TINY_MAMBA_ARCHS
_SEED_ORDER += TINY_GEMMA4_ARCHS
_SEED_ORDER += TINY_DSA_ARCHS
_SEED_ORDER += TINY_M2_ARCHS
_SEED_ORDER += TINY_R2_ARCHS
_SEED_ORDER += TINY_D2_ARCHS
_SEED_ORDER += TINY_GEMMA3N_ARCHS
_SEED_ORDER += TINY_NEWTEXT_ARCHS
_SEED_ORDER += TINY_ALIBI_ARCHS
_SEED_ORDER += TINY_RNN_ARCHS
_SEED_ORDER += TINY_LINEAR_ARCHS
_SEED_ORDER += TINY_DSV4_ARCHS
_SEED_ORDER += TINY_MOREMOE_ARCHS
_SEED_ORDER += TINY_INKLING_ARCHS
_SEED_ORDER += TINY_DECODER_ARCHS
_SEED_ORDER += TINY_MODERNBERT_ARCHS
_SEED_ORDER += TINY_ENCDEC_ARCHS
_SEED_ORDER += TINY_PHI4MM_ARCHS
_SEED_ORDER += TINY_FALCON_ALIBI_ARCHS
_SEED_ORDER += TINY_MINIMAXM3_ARCHS
_SEED_ORDER += TINY_MLARGE4_ARCHS
_SEED_ORDER += TINY_STEP3_ARCHS
FAMILY_ARCHS += D2_COMMON_CHECK_ARCHS   # GraniteSWA, GraniteMoeSWA, ... (tiny_d2_models.py)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    '{"name": "Alice", "age": 30, "tags": ["a", "b"], "ok": true, "score": 1.5}',
    "Hello, world! How are you today? I am fine, thank you.",
    "def add(a, b):\n    return a + b\n",
    "0123456789 +-*/=<>()[]{} :;,.'\"",
]


def make_tiny_tokenizer(vocab_size: int = 400):
    """Byte-level BPE (any text encodes) with <|endoftext|>, <|im_start|>, <|im_end|> (eos)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _hf_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    if arch in TINY_MOE_ARCHS:
        return moe_config(arch, vocab, eos, pad)
    if arch in TINY_MLA_ARCHS:
        return mla_config(arch, vocab, eos, pad)
    if arch in TINY_LLAMA4_ARCHS:
        return llama4_config(arch, vocab, eos, pad)
    if arch in TINY_GPT_ARCHS + TINY_GPT_VARIANT_ARCHS:
        return gpt_config(arch, vocab, eos, pad)
    more = more_model_config(arch, vocab, eos, pad)
    if more is not None:
        return more
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
                  bos_token_id=None, max_position_embeddings=256)
    if arch == "llama":  # untied, llama3 rope scaling that changes most frequencies
        return LlamaConfig(num_hidden_layers=3, tie_word_embeddings=False, rope_theta=10000.0,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                           **common)
    if arch == "qwen2":  # tied, q/k/v bias, linear rope scaling
        return Qwen2Config(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1e6,
                           rope_scaling={"rope_type": "linear", "factor": 2.0}, **common)
    if arch == "qwen3":  # explicit head_dim != hidden/heads, q/k norm, attention bias incl. o_proj
        return Qwen3Config(num_hidden_layers=2, tie_word_embeddings=False, head_dim=32,
                           attention_bias=True, rope_theta=10000.0, **common)
    if arch == "mistral":  # tied, multi-query, a sliding window shorter than the test sequences (22 tokens)
        common.update(num_key_value_heads=1, max_position_embeddings=512)
        return MistralConfig(num_hidden_layers=2, tie_word_embeddings=True, sliding_window=16,
                             rope_theta=10000.0, **common)
    return _family_config(arch, common)


def _family_config(arch: str, common: dict):
    """Gemma 2/3 and Phi-3 with sliding windows far shorter than the test prompts, soft-caps that bind, a score
    scale that differs from head_dim's, distinct global and local rope bases, and LongRoPE from position 32;
    Gemma 1 and OLMo 2/3 (_post_norm_config); Granite with every multiplier far from 1 (and its score scale far from
    head_dim's), SmolLM3 with NoPE on one layer of three."""
    from transformers import Gemma2Config, GraniteConfig, Phi3Config, SmolLM3Config
    from transformers.models.gemma3 import Gemma3TextConfig

    gemma = dict(head_dim=32, query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6)
    if arch == "gemma2":  # layers 0 and 2 sliding (window 8), 1 full; attention and final soft-caps
        common.update(rms_norm_eps=1e-6)
        return Gemma2Config(num_hidden_layers=3, sliding_window=8, attn_logit_softcapping=2.0,
                            final_logit_softcapping=3.0, rope_theta=10000.0, tie_word_embeddings=True,
                            **{**common, **gemma})
    if arch == "gemma3":  # sliding, full, sliding (window 6); local rope base 100, global 10000 with linear x2
        return Gemma3TextConfig(num_hidden_layers=3, sliding_window=6, tie_word_embeddings=True,
                                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                    "rope_theta": 10000.0},
                                                 "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
                                **{**common, **gemma})
    if arch == "phi3":  # window 12 on every layer, untied, LongRoPE with distinct short and long factors
        half = 8  # head_dim 16 / 2
        short = [1.0 + 0.25 * i for i in range(half)]
        long_ = [2.0 + 0.5 * i for i in range(half)]
        return Phi3Config(num_hidden_layers=2, sliding_window=12, tie_word_embeddings=False,
                          original_max_position_embeddings=32, rope_theta=10000.0,
                          rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long_},
                          **common)
    if arch == "granite":  # tied, attention bias incl. o_proj; head_dim 16 would scale scores by 0.25
        return GraniteConfig(num_hidden_layers=3, tie_word_embeddings=True, attention_bias=True, rope_theta=10000.0,
                             embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.7,
                             logits_scaling=4.0, **common)
    if arch == "smollm3":  # tied, attention bias incl. o_proj; no_rope_layers [1, 0, 1]: layer 1 is NoPE
        return SmolLM3Config(num_hidden_layers=3, tie_word_embeddings=True, attention_bias=True,
                             no_rope_layer_interval=2, rope_theta=10000.0, **common)
    if arch.startswith(("starcoder2", "stablelm")):
        return _layernorm_config(arch, common)
    return _post_norm_config(arch, common)


def _layernorm_config(arch: str, common: dict):
    """LayerNorm families: every norm and bias random, GQA, partial rotary that leaves 12 of 16 dims unrotated."""
    from transformers import StableLmConfig, Starcoder2Config

    eps = common.pop("rms_norm_eps")
    if arch == "starcoder2":  # tied, use_bias on q/k/v/o and the MLP, gelu-tanh, window 10 on every layer
        return Starcoder2Config(num_hidden_layers=3, sliding_window=10, use_bias=True, norm_epsilon=eps,
                                hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True, rope_theta=10000.0, **common)
    stablelm = dict(num_hidden_layers=2, layer_norm_eps=eps, tie_word_embeddings=False, hidden_act="silu",
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    if arch == "stablelm":  # StableLM 2 1.6B's shape: q/k/v bias, sequential residual; plus per-head q/k LayerNorms
        return StableLmConfig(use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=False, **stablelm, **common)
    # StableLM 2 12B's shape: the parallel residual (no post-attention norm), per-head q/k LayerNorms, no bias
    return StableLmConfig(use_qkv_bias=False, qk_layernorm=True, use_parallel_residual=True, **stablelm, **common)


def _post_norm_config(arch: str, common: dict):
    from transformers import GemmaConfig, Olmo2Config, Olmo3Config

    if arch == "gemma":  # head_dim 32 != 64 / 4 heads, tied, embeddings scaled by 8, (1 + weight) norms, GeGLU
        return GemmaConfig(num_hidden_layers=2, head_dim=32, hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True,
                           rope_theta=10000.0, **{**common, "rms_norm_eps": 1e-6})
    if arch == "olmo2":  # untied; q_norm over 4 heads and k_norm over 2, each as one whole-width norm
        return Olmo2Config(num_hidden_layers=3, tie_word_embeddings=False, rope_theta=10000.0, **common)
    if arch == "olmo3":  # sliding (window 6), full, sliding; YaRN x4 from 64 on the full layer, base 100 on the others
        return Olmo3Config(num_hidden_layers=3, tie_word_embeddings=False, sliding_window=6,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                               "original_max_position_embeddings": 64},
                                            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
                           **common)
    return _more_family_config(arch, common)


def _more_family_config(arch: str, common: dict):
    """Phi and Cohere (parallel blocks, LayerNorms with their own eps field) and GLM-4."""
    from transformers import CohereConfig, Glm4Config, PhiConfig

    common = {k: v for k, v in common.items() if k != "rms_norm_eps"}
    if arch == "phi":  # 6 of 16 head dims rotate (phi-2's 0.4), q/k LayerNorms, untied lm head with its bias
        return PhiConfig(num_hidden_layers=3, partial_rotary_factor=0.4, qk_layernorm=True, layer_norm_eps=1e-5,
                         tie_word_embeddings=False, **common)
    if arch == "cohere":  # interleaved rope, per-head q/k norms, logits x 4, tied, biases on all four projections
        return CohereConfig(num_hidden_layers=2, use_qk_norm=True, logit_scale=4.0, layer_norm_eps=1e-5,
                            attention_bias=True, tie_word_embeddings=True, **common)
    if arch == "glm4":  # head_dim 32 != 64 / 4 heads, its first 16 dims rotating in interleaved pairs, q/k/v biases
        return Glm4Config(num_hidden_layers=2, head_dim=32, partial_rotary_factor=0.5, rms_norm_eps=1e-5,
                          tie_word_embeddings=False, **common)
    return _llama_like_config(arch, {**common, "rms_norm_eps": 1e-5})


def _llama_like_config(arch: str, common: dict):
    """Ministral, Seed-OSS, ERNIE 4.5, EXAONE 4, Hunyuan and Arcee, each with its difference from Llama binding."""
    from transformers import (
        ArceeConfig,
        Ernie4_5Config,
        Exaone4Config,
        HunYuanDenseV1Config,
        MinistralConfig,
        SeedOssConfig,
    )

    windowed = dict(num_hidden_layers=3, sliding_window=6, head_dim=16,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    if arch == "ministral":  # untied; sliding (window 6), full, sliding
        return MinistralConfig(tie_word_embeddings=False, rope_theta=10000.0, **windowed, **common)
    if arch == "seed_oss":  # head_dim 32 != 64 / 4 heads, q/k/v biases without the o_proj one (attention_out_bias)
        return SeedOssConfig(num_hidden_layers=2, head_dim=32, attention_bias=True, attention_out_bias=False,
                             tie_word_embeddings=False, rope_theta=10000.0, **common)
    if arch == "ernie4_5":  # tied (its default), every head dim rotating in interleaved pairs
        return Ernie4_5Config(num_hidden_layers=2, head_dim=16, use_bias=False, tie_word_embeddings=True,
                              rope_theta=10000.0, **common)
    if arch == "exaone4":  # post-norms, per-head q/k norms; sliding (window 6, rope), full (no rope), sliding
        return Exaone4Config(tie_word_embeddings=False, rope_theta=10000.0, **windowed, **common)
    if arch == "hunyuan":  # per-head q/k norms after rope, biases on all four projections, NTK-alpha rope (alpha 50)
        return HunYuanDenseV1Config(num_hidden_layers=2, head_dim=16, attention_bias=True, tie_word_embeddings=True,
                                    rope_parameters={"rope_type": "dynamic", "alpha": 50.0, "factor": 1.0,
                                                     "rope_theta": 10000.0},
                                    **common)
    if arch == "arcee":  # untied, relu^2 MLP (no gate), biases on all four attention projections
        return ArceeConfig(num_hidden_layers=2, hidden_act="relu2", attention_bias=True, tie_word_embeddings=False,
                           rope_theta=10000.0, **common)
    return _dense_family_config(arch, common)


def _dense_family_config(arch: str, common: dict):
    """GLM-4 (2024), Helium, Nemotron, OLMo and Apertus, each with its difference from Llama binding; Llama with
    mlp_bias."""
    from transformers import ApertusConfig, GlmConfig, HeliumConfig, LlamaConfig, NemotronConfig, OlmoConfig

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if arch == "glm":  # head_dim 32 != 64 / 4 heads, its first 16 dims rotating in interleaved pairs, q/k/v biases
        return GlmConfig(num_hidden_layers=2, head_dim=32, attention_bias=True, tie_word_embeddings=False,
                         rope_parameters={**rope, "partial_rotary_factor": 0.5}, **common)
    if arch == "helium":  # every head dim rotating in interleaved pairs, q/k/v biases (no o_proj one), tied
        return HeliumConfig(num_hidden_layers=2, head_dim=16, attention_bias=True, tie_word_embeddings=True,
                            rope_parameters=rope, **common)
    if arch == "nemotron":  # LayerNorm1P, 4 of 16 head dims rotating, relu^2 MLP with biases, biases on q/k/v/o
        eps = common.pop("rms_norm_eps")
        return NemotronConfig(num_hidden_layers=2, norm_eps=eps, hidden_act="relu2", attention_bias=True,
                              mlp_bias=True, tie_word_embeddings=False,
                              rope_parameters={**rope, "partial_rotary_factor": 0.25}, **common)
    if arch == "olmo":  # parameterless LayerNorms, q/k/v clamped to +-0.4, biases on q/k/v/o, tied
        common.pop("rms_norm_eps")
        return OlmoConfig(num_hidden_layers=2, clip_qkv=0.4, attention_bias=True, tie_word_embeddings=True,
                          rope_parameters=rope, **common)
    if arch == "apertus":  # xIELU MLP, per-head q/k norms, biases on q/k/v/o, llama3 rope from position 32
        return ApertusConfig(num_hidden_layers=2, hidden_act="xielu", attention_bias=True, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                              "rope_theta": 10000.0}, **common)
    if arch == "vaultgemma":  # Gemma 2's windows (8 on layers 0 and 2), soft-caps and score scale; pre-norms only
        from transformers import VaultGemmaConfig

        return VaultGemmaConfig(num_hidden_layers=3, sliding_window=8, attn_logit_softcapping=2.0,
                                final_logit_softcapping=3.0, head_dim=32, query_pre_attn_scalar=24,
                                hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                                rope_parameters=rope, **{**common, "rms_norm_eps": 1e-6})
    if arch == "nanochat":  # weightless norms, the embeddings normalised, q/k norms after rope, logits capped at 3
        from transformers import NanoChatConfig

        return NanoChatConfig(num_hidden_layers=2, hidden_act="relu2", attention_bias=True, tie_word_embeddings=False,
                              final_logit_softcapping=3.0, rope_parameters=rope, **common)
    if arch == "llama_mlp_bias":  # biases on gate, up and down and on all four attention projections
        return LlamaConfig(num_hidden_layers=2, mlp_bias=True, attention_bias=True, tie_word_embeddings=False,
                           rope_parameters=rope, **common)
    if arch in MORE_DENSE_ARCHS:
        return more_dense_config(arch, common)
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {TINY_ARCHS}")


def make_tiny_model(tmp_path_factory, arch: str, max_shard_size=None, tokenizer=None):
    """Build, randomise and save a tiny HF model of `arch` (TINY_ARCHS, TINY_MOE_ARCHS, TINY_MLA_ARCHS,
    TINY_VARIANT_ARCHS, TINY_LLAMA4_ARCHS, TINY_GPT_ARCHS or TINY_GPT_VARIANT_ARCHS).

    Returns the folder (config.json, generation_config.json, *.safetensors, tokenizer files).
    max_shard_size (e.g. "100KB") makes save_pretrained shard the weights with an index json.
    tokenizer: one from make_tiny_tokenizer with tokens added (the vocabulary follows its length).
    """
    tok = tokenizer or make_tiny_tokenizer()
    eos, pad = tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")
    config = _hf_config(arch, len(tok), eos, pad)
    return save_tiny_model(tmp_path_factory, config, f"tiny-{arch}", tok, 1000 + _SEED_ORDER.index(arch), max_shard_size)


def hf_auto_class(model_type: str):
    """AutoModelForCausalLM, or AutoModelForImageTextToText for vision-language models it does not build (LLaVA,
    Mistral 3, Qwen2-VL ...) or builds as their language model alone (Llama 4, Qwen3.5, Llama 3.2 Vision)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, MllamaForCausalLM, MllamaTextConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

    causal = model_type in CAUSAL and model_type not in ("llama4", "qwen3_5", "qwen3_5_moe", "mllama", "qwen4_exp")
    if model_type == "mllama_text_model":   # Llama 3.2 Vision's text model alone: no auto class builds it
        AutoModelForCausalLM.register(MllamaTextConfig, MllamaForCausalLM, exist_ok=True)
        return AutoModelForCausalLM
    return AutoModelForCausalLM if causal else AutoModelForImageTextToText


def save_tiny_model(tmp_path_factory, config, name: str, tok, seed: int, max_shard_size=None):
    """The HF model of `config` with every weight random (seeded), saved with `tok` into a fresh folder."""
    gen = torch.Generator().manual_seed(seed)
    model = hf_auto_class(config.model_type).from_config(config).float().eval()
    with torch.no_grad():
        for name_, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name_.endswith("sinks"):  # gpt-oss: logits that take a visible share of each softmax
                p.copy_(0.5 + noise)
            elif name_.endswith("A_log"):  # gated delta nets: decays of 0.8-1 a token, so the state carries far
                p.copy_(-2.5 + noise)
            elif p.dim() == 1:  # norms around 1, biases around 0
                p.copy_((1.0 if "norm" in name_ else 0.0) + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)
        for name_, b in model.named_buffers():
            # [E]: spread like the sigmoid scores, so it moves choices (LFM2-MoE's expert_bias is a buffer too)
            if name_.endswith(("e_score_correction_bias", "feed_forward.expert_bias")):
                b.copy_(0.2 * torch.randn(b.shape, generator=gen))
    folder = tmp_path_factory.mktemp(name)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(folder, **kwargs)
    tok.save_pretrained(folder)
    return folder
