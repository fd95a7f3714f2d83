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
    if arch in TINY_ASSEMBLED_ARCHS:
        from tiny_assembled_models import assembled_config

        return assembled_config(arch, vocab, eos, pad)
    if arch in TINY_D2_ARCHS:
        from tiny_d2_models import d2_config

        return d2_config(arch, vocab, eos, pad)
    return None
