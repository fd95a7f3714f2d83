"""Where ModelConfig.from_hf reads the recurrent families added with the Mamba stacks (no torch): Mamba2ForCausalLM,
MambaForCausalLM and FalconMambaForCausalLM (mamba_stack_config.py), OlmoHybridForCausalLM (olmo_hybrid_config.py),
JambaForCausalLM (jamba_config.py), Zamba2ForCausalLM (zamba2_config.py), the linear-attention hybrids
(linear_hybrid_config.py: LaraMini, MiniMax, Kimi Linear, Ling 3, Qwen4-Exp); the "rnn" group's (rnn_config.py); and
the views of Dots 3 Note's per-layer fields (dots3_config.py) and Hy V4's capped context (hy_v4_config.py)."""

from .dots3_config import dots3_view
from .hy_v4_config import hy_v4_view
from .jamba_config import with_jamba
from .linear_hybrid_config import (
    LINEAR_HYBRID_ARCHITECTURES,
    LINEAR_HYBRID_MODEL_TYPES,
    linear_hybrid_view,
    with_linear_hybrid,
)
from .mamba_stack_config import (
    MAMBA_STACK_ARCHITECTURES,
    MAMBA_STACK_MODEL_TYPES,
    FieldsView,
    attention_free,
    with_mamba_stack,
)
from .mllama_config import mllama_view
from .newtext_config import pruned_vocabulary
from .olmo_hybrid_config import with_olmo_hybrid
from .rnn_config import RNN_ARCHITECTURES, RNN_MODEL_TYPES, rnn_hf_fields, with_rnn
from .zamba2_config import with_zamba2

MORE_RECURRENT_ARCHITECTURES = MAMBA_STACK_ARCHITECTURES + ("OlmoHybridForCausalLM", "JambaForCausalLM",
                                                           "Zamba2ForCausalLM")
MORE_RECURRENT_MODEL_TYPES = {**MAMBA_STACK_MODEL_TYPES, "olmo_hybrid": "OlmoHybridForCausalLM",
                              "jamba": "JambaForCausalLM", "zamba2": "Zamba2ForCausalLM", **RNN_MODEL_TYPES}
MORE_RECURRENT_ARCHITECTURES += RNN_ARCHITECTURES
MORE_RECURRENT_ARCHITECTURES += LINEAR_HYBRID_ARCHITECTURES
MORE_RECURRENT_MODEL_TYPES.update(LINEAR_HYBRID_MODEL_TYPES)


def hf_fields(arch: str, hf_config):
    """hf_config as from_hf reads its common fields (the Mamba stacks name no attention: attention_free; Zamba2's
    MLP activation is read by with_zamba2; Apertus 1.5's vocabulary: newtext_config.pruned_vocabulary)."""
    if arch in RNN_ARCHITECTURES:
        return rnn_hf_fields(arch, hf_config)
    if arch == "Apertus1p5TextForCausalLM":
        return pruned_vocabulary(arch, hf_config)
    if arch == "MllamaForCausalLM":
        return mllama_view(hf_config)
    if arch == "Zamba2ForCausalLM":
        return FieldsView(hf_config, {"hidden_act": "silu"})
    if arch in LINEAR_HYBRID_ARCHITECTURES:
        return linear_hybrid_view(hf_config)
    if arch == "Dots3NoteForCausalLM":   # its attention fields differ by layer (dots3_config.py)
        return dots3_view(hf_config)
    if arch == "HYV4ForCausalLM":   # its context capped at index_topk
        return hy_v4_view(hf_config)
    return attention_free(hf_config) if arch in MAMBA_STACK_ARCHITECTURES else hf_config


def with_more_recurrent(config, hf_config):
    """ModelConfig `config` with its family's recurrent fields; ValueError naming a field the layers do not run."""
    if config.architecture in RNN_ARCHITECTURES:
        return with_rnn(config, hf_config)
    if config.architecture in MAMBA_STACK_ARCHITECTURES:
        return with_mamba_stack(config, hf_config)
    if config.architecture == "JambaForCausalLM":
        return with_jamba(config, hf_config)
    if config.architecture == "Zamba2ForCausalLM":
        return with_zamba2(config, hf_config)
    if config.architecture in LINEAR_HYBRID_ARCHITECTURES:
        return with_linear_hybrid(config, hf_config)
    return with_olmo_hybrid(config, hf_config)
