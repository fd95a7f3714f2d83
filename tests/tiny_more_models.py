"""The tiny models of the families added since stop 56, each built by its own module (tiny_models.make_tiny_model
dispatches here): Solar Open, EXAONE MoE, FlexOlmo, Youtu-LLM, A.X K1 (tiny_assembled_models.py); Phi-3.5-MoE, DBRX,
MiniCPM3, Arcee Trinity (tiny_routed_models.py); the hybrids with a recurrent state (hybrid_models.py, lfm2_models.py).
"""

from tiny_d2_models import TINY_D2_ARCHS

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


def more_model_config(arch: str, vocab: int, eos: int, pad: int):
    """The HF config of one of these tiny models, or None for an arch of tiny_models' own."""
    if arch in TINY_HYBRID_ARCHS + TINY_MAMBA_ARCHS:
        from hybrid_models import hybrid_config

        return hybrid_config(arch, vocab, eos, pad)
    if arch in TINY_CONV_ARCHS:
        from lfm2_models import lfm2_config

        return lfm2_config(arch, vocab, eos, pad)
    if arch in TINY_ROUTED_ARCHS:
        from tiny_routed_models import routed_config

        return routed_config(arch, vocab, eos, pad)
    if arch in TINY_GEMMA4_ARCHS:
        from tiny_gemma4_models import gemma4_config

        return gemma4_config(arch, vocab, eos, pad)
    if arch in TINY_DSA_ARCHS:
        from tiny_dsa_models import dsa_config

        return dsa_config(arch, vocab, eos, pad)
    if arch in TINY_ASSEMBLED_ARCHS:
        from tiny_assembled_models import assembled_config

        return assembled_config(arch, vocab, eos, pad)
    if arch in TINY_M2_ARCHS:
        from tiny_m2_models import m2_config

        return m2_config(arch, vocab, eos, pad)
    if arch in TINY_R2_ARCHS:
        from tiny_r2_models import r2_config

        return r2_config(arch, vocab, eos, pad)
    if arch in TINY_D2_ARCHS:
        from tiny_d2_models import d2_config

        return d2_config(arch, vocab, eos, pad)
    return None
