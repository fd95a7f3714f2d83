"""Where ModelConfig.from_hf reads the recurrent families added with the Mamba stacks (no torch): Mamba2ForCausalLM,
MambaForCausalLM and FalconMambaForCausalLM (mamba_stack_config.py), OlmoHybridForCausalLM (olmo_hybrid_config.py),
JambaForCausalLM (jamba_config.py), Zamba2ForCausalLM (zamba2_config.py); and the views of Dots 3 Note's per-layer
fields (dots3_config.py) and Hy V4's capped context (hy_v4_config.py)."""

from .dots3_config import dots3_view
from .hy_v4_config import hy_v4_view
from .jamba_config import with_jamba
from .mamba_stack_config import (
    MAMBA_STACK_ARCHITECTURES,
    MAMBA_STACK_MODEL_TYPES,
    FieldsView,
    attention_free,
    with_mamba_stack,
)
from .olmo_hybrid_config import with_olmo_hybrid
from .zamba2_config import with_zamba2

MORE_RECURRENT_ARCHITECTURES = MAMBA_STACK_ARCHITECTURES + ("OlmoHybridForCausalLM", "JambaForCausalLM",
                                                           "Zamba2ForCausalLM")
MORE_RECURRENT_MODEL_TYPES = {**MAMBA_STACK_MODEL_TYPES, "olmo_hybrid": "OlmoHybridForCausalLM",
                              "jamba": "JambaForCausalLM", "zamba2": "Zamba2ForCausalLM"}


def hf_fields(arch: str, hf_config):
    """hf_config as from_hf reads its common fields (the Mamba stacks name no attention: attention_free; Zamba2's
    MLP activation is read by with_zamba2)."""
    if arch == "Zamba2ForCausalLM":
        return FieldsView(hf_config, {"hidden_act": "silu"})
    if arch == "Dots3NoteForCausalLM":   # its attention fields differ by layer (dots3_config.py)
        return dots3_view(hf_config)
    if arch == "HYV4ForCausalLM":   # its context capped at index_topk
        return hy_v4_view(hf_config)
    return attention_free(hf_config) if arch in MAMBA_STACK_ARCHITECTURES else hf_config


def with_more_recurrent(config, hf_config):
    """ModelConfig `config` with its family's recurrent fields; ValueError naming a field the layers do not run."""
    if config.architecture in MAMBA_STACK_ARCHITECTURES:
        return with_mamba_stack(config, hf_config)
    if config.architecture == "JambaForCausalLM":
        return with_jamba(config, hf_config)
    if config.architecture == "Zamba2ForCausalLM":
        return with_zamba2(config, hf_config)
    return with_olmo_hybrid(config, hf_config)
