"""Where ModelConfig.from_hf reads the recurrent families added with the Mamba stacks (no torch): Mamba2ForCausalLM,
MambaForCausalLM and FalconMambaForCausalLM (mamba_stack_config.py), OlmoHybridForCausalLM (olmo_hybrid_config.py),
JambaForCausalLM (jamba_config.py), Zamba2ForCausalLM (zamba2_config.py), the linear-attention hybrids
(linear_hybrid_config.py: LaraMini, MiniMax, Kimi Linear, Ling 3, Qwen4-Exp); the "rnn" group's (rnn_config.py);
Inkling (inkling_config.py); and the views of other families' configs (FIELD_VIEWS)."""

import functools

from . import doge_config, kolibri1_1_config, minimax_m3_config
from .bert_config import BERT_LIKE_FIELDS, bert_view
from .decoder_config import BART_LIKE_FIELDS, decoder_view
from .dots3_config import dots3_view
from .hy_v4_config import hy_v4_view
from .inkling_config import INKLING_ARCHITECTURES, INKLING_MODEL_TYPES, inkling_view, with_inkling
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
MORE_RECURRENT_ARCHITECTURES += INKLING_ARCHITECTURES
MORE_RECURRENT_MODEL_TYPES.update(INKLING_MODEL_TYPES)
# the architectures whose common fields from_hf reads through a view of their config: a context capped where their
# attention keeps every key (Kolibri 1.1, Doge, Hy V4), fields that differ by layer (Dots 3 Note), a pruned vocabulary
# (Apertus 1.5), Zamba2's MLP activation (read by with_zamba2), the linear-attention hybrids', Inkling's, and the
# decoders of encoder families' (their head counts)
FIELD_VIEWS = {"Kolibri1_1ForCausalLM": kolibri1_1_config.view, "DogeForCausalLM": doge_config.view,
               "HYV4ForCausalLM": hy_v4_view, "Dots3NoteForCausalLM": dots3_view,
               minimax_m3_config.ARCH: minimax_m3_config.view,
               "Apertus1p5TextForCausalLM": functools.partial(pruned_vocabulary, "Apertus1p5TextForCausalLM"),
               "Zamba2ForCausalLM": lambda hf_config: FieldsView(hf_config, {"hidden_act": "silu"}),
               **dict.fromkeys(LINEAR_HYBRID_ARCHITECTURES, linear_hybrid_view),
               **dict.fromkeys(INKLING_ARCHITECTURES, inkling_view),
               **{a: functools.partial(decoder_view, a) for a in BART_LIKE_FIELDS},
               **{a: functools.partial(bert_view, a) for a in BERT_LIKE_FIELDS}}


def hf_fields(arch: str, hf_config):
    """hf_config as from_hf reads its common fields (the Mamba stacks name no attention: attention_free)."""
    if arch in RNN_ARCHITECTURES:
        return rnn_hf_fields(arch, hf_config)
    if arch in FIELD_VIEWS:
        return FIELD_VIEWS[arch](hf_config)
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
    if config.architecture in INKLING_ARCHITECTURES:
        return with_inkling(config, hf_config)
    return with_olmo_hybrid(config, hf_config)
