"""The tiny models of the families added since stop 56, each built by its own module (tiny_models.make_tiny_model
dispatches here): Solar Open, EXAONE MoE, FlexOlmo, Youtu-LLM, A.X K1 (tiny_assembled_models.py); Phi-3.5-MoE, DBRX,
MiniCPM3, Arcee Trinity (tiny_routed_models.py); the hybrids with a recurrent state (hybrid_models.py, lfm2_models.py).
"""

from tiny_d2_models import TINY_D2_ARCHS
from tiny_newtext_models import TINY_NEWTEXT_ARCHS  # Cohere 2 MoE, BitNet, Aria's text model, ...

# Solar Open, EXAONE MoE, FlexOlmo, Youtu-LLM, A.X K1: their own test file
TINY_ASSEMBLED_ARCHS = ("solar_open", "exaone_moe", "flex_olmo", "youtu", "axk1")
# families with their own routing or attention: Phi-3.5-MoE, DBRX, MiniCPM3, Arcee Trinity
TINY_ROUTED_ARCHS = ("phimoe", "dbrx", "minicpm3", "afmoe")
# gated delta nets (Qwen3-Next with experts, Qwen3.5 dense) and Mamba-2 mixers (Granite 4.0 with experts, and dense)
TINY_HYBRID_ARCHS = ("qwen3_next", "qwen3_5", "granitemoehybrid", "granitemoehybrid_dense")
# short-convolution hybrids: LFM2 dense and LFM2-MoE
TINY_CONV_ARCHS = ("lfm2", "lfm2_moe")
# Mamba-2 hybrids (hybrid_models.mamba_config): Bamba, Nemotron-H (latent experts), Nemotron Nano 2, Falcon-H1
TINY_MAMBA_ARCHS = ("bamba", "nemotron_h", "nemotron_h_dense", "falcon_h1", "falcon_h1_plain")
# Gemma 4 (tiny_gemma4_models.py): dense with KV shared and per-layer inputs, with experts, inside its multimodal model
TINY_GEMMA4_ARCHS = ("gemma4", "gemma4_moe", "gemma4_mm")
# DeepSeek Sparse Attention (tiny_dsa_models.py): DeepSeek-V3.2 (YaRN, groups), GLM-5 (a "shared" indexer layer), A.X K2
TINY_DSA_ARCHS = ("deepseek_v32", "glm_moe_dsa", "axk2")
# families built from DeepSeek, Qwen3-MoE and GLM-4-MoE pieces (tiny_m2_models.py)
TINY_M2_ARCHS = ("mistral4", "minicpm5_moe", "kolibri1", "hy_v3", "laguna", "mellum", "flint")
# more recurrent models (tiny_r2_models.py): Mamba-2, Mamba, Falcon Mamba (no attention); OLMo Hybrid, Jamba, Zamba2
TINY_R2_ARCHS = ("mamba2", "mamba", "falcon_mamba", "olmo_hybrid", "jamba", "zamba2")
# Gemma 3n (tiny_gemma3n_models.py): AltUp, LAuReL, sparse gates, KV sharing; and inside its multimodal model
TINY_GEMMA3N_ARCHS = ("gemma3n", "gemma3n_mm")
# ALiBi families and early GPTs (tiny_alibi_models.py): BLOOM, MPT; GPT-1, BioGPT, CTRL, GPT-NeoX-Japanese
TINY_ALIBI_ARCHS = ("bloom", "mpt", "openai_gpt", "biogpt", "ctrl", "gpt_neox_japanese")
# the "rnn" group's recurrent models (tiny_rnn_models.py): Zamba, RecurrentGemma, RWKV-4, xLSTM
TINY_RNN_ARCHS = ("zamba", "recurrent_gemma", "rwkv", "xlstm")
# linear-attention hybrids (tiny_linear_models.py): LaraMini, MiniMax, Kimi Linear, Ling 3, Qwen4-Exp
TINY_LINEAR_ARCHS = ("lara_mini", "minimax", "kimi_linear", "bailing_hybrid", "qwen4_exp")
# the "moremoe" group (tiny_moremoe_models.py): LongCat-Flash, MiMo-V2-Flash, Doge, Kolibri 1.1
TINY_MOREMOE_ARCHS = ("longcat_flash", "mimo_v2_flash", "doge", "kolibri1_1")

# newer DeepSeek- and Qwen3-MoE-derived families (tiny_dsv4_models.py): Ergo, Zaya, Beam, Dots 3 Note, Hy V4
TINY_DSV4_ARCHS = ("ergo", "zaya", "beam", "dots3_note", "hy_v4")
# the "inkling" group (tiny_inkling_models.py): Inkling's, Inkling 2's and Inkling 2 Loop's text models
TINY_INKLING_ARCHS = ("inkling", "inkling2", "inkling2_loop")
# decoders of encoder-decoder families as causal LMs (tiny_decoder_models.py): BART-like, BERT-like
TINY_DECODER_ARCHS = ("bart", "mbart", "plbart", "mvp", "blenderbot", "blenderbot_small", "pegasus", "marian",
                      "trocr", "bigbird_pegasus", "bert", "roberta", "xlm_roberta", "camembert", "data2vec_text",
                      "electra", "ernie", "rembert", "megatron_bert", "xlm_roberta_xl", "roberta_prelayernorm",
                      "bert_generation", "bigbird", "roformer",
                      "roc_bert", "roc_bert_plain", "xmod", "trocr_sinusoidal")
# the ModernBERT decoder (tiny_modernbert_models.py): tied with every bias, and HF's defaults untied
TINY_MODERNBERT_ARCHS = ("modernbert_decoder", "modernbert_decoder_plain")
# GIT's text decoder and XLM's causal LMs (tiny_encdec_models.py)
TINY_ENCDEC_ARCHS = ("git", "xlm", "xlm_sinusoidal")
# Phi-4-multimodal served for text (tiny_phi4mm_models.py): as released (LongRoPE, partial rotary, windows, tied), plain
TINY_PHI4MM_ARCHS = ("phi4mm", "phi4mm_plain")
# Falcon with ALiBi (tiny_falcon_alibi_models.py): falcon-rw-1b's layout
TINY_FALCON_ALIBI_ARCHS = ("falcon_rw",)
# MiniMax-M3's language model (tiny_minimaxm3_models.py)
TINY_MINIMAXM3_ARCHS = ("minimax_m3",)
# Mistral Large 4 served for text (tiny_mlarge4_models.py): NoPE layers, latent KV reused across layers, LeRoPE
TINY_MLARGE4_ARCHS = ("mistral_large4",)
# Step 3.7 served for text (tiny_step3_models.py): its conditional-generation model, the language model's every option
TINY_STEP3_ARCHS = ("step3p7", "step3p7_yarn")


def more_model_config(arch: str, vocab: int, eos: int, pad: int):
    """The HF config of one of these tiny models, or None for an arch of tiny_models' own."""
    import importlib

    for archs, (module, builder) in _BUILDERS:
        if arch in archs:
            return getattr(importlib.import_module(module), builder)(arch, vocab, eos, pad)
    return None


# each group's module and builder (imported when one of its models is first built)
_BUILDERS = (
    (TINY_HYBRID_ARCHS + TINY_MAMBA_ARCHS, ("hybrid_models", "hybrid_config")),
    (TINY_CONV_ARCHS, ("lfm2_models", "lfm2_config")),
    (TINY_ROUTED_ARCHS, ("tiny_routed_models", "routed_config")),
    (TINY_GEMMA4_ARCHS, ("tiny_gemma4_models", "gemma4_config")),
    (TINY_DSA_ARCHS, ("tiny_dsa_models", "dsa_config")),
    (TINY_ASSEMBLED_ARCHS, ("tiny_assembled_models", "assembled_config")),
    (TINY_M2_ARCHS, ("tiny_m2_models", "m2_config")),
    (TINY_R2_ARCHS, ("tiny_r2_models", "r2_config")),
    (TINY_D2_ARCHS, ("tiny_d2_models", "d2_config")),
    (TINY_GEMMA3N_ARCHS, ("tiny_gemma3n_models", "gemma3n_config")),
    (TINY_NEWTEXT_ARCHS, ("tiny_newtext_models", "newtext_config")),
    (TINY_ALIBI_ARCHS, ("tiny_alibi_models", "alibi_config")),
    (TINY_RNN_ARCHS, ("tiny_rnn_models", "rnn_config")),
    (TINY_LINEAR_ARCHS, ("tiny_linear_models", "linear_config")),
    (TINY_DSV4_ARCHS, ("tiny_dsv4_models", "dsv4_config")),
    (TINY_MOREMOE_ARCHS, ("tiny_moremoe_models", "moremoe_config")),
    (TINY_INKLING_ARCHS, ("tiny_inkling_models", "inkling_config")),
    (TINY_DECODER_ARCHS, ("tiny_decoder_models", "decoder_config")),
    (TINY_MODERNBERT_ARCHS, ("tiny_modernbert_models", "modernbert_config")),
    (TINY_ENCDEC_ARCHS, ("tiny_encdec_models", "encdec_config")),
    (TINY_PHI4MM_ARCHS, ("tiny_phi4mm_models", "phi4mm_config")),
    (TINY_FALCON_ALIBI_ARCHS, ("tiny_falcon_alibi_models", "falcon_alibi_config")),
    (TINY_MINIMAXM3_ARCHS, ("tiny_minimaxm3_models", "minimaxm3_config")),
    (TINY_MLARGE4_ARCHS, ("tiny_mlarge4_models", "mlarge4_config")),
    (TINY_STEP3_ARCHS, ("tiny_step3_models", "step3_config")),
)
