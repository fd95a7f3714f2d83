"""Where more_recurrent_config.py reads the recurrent families of the "rnn" group (no torch): ZambaForCausalLM
(zamba_config.py), RecurrentGemmaForCausalLM (recurrent_gemma_config.py), RwkvForCausalLM (rwkv_config.py), xLSTMForCausalLM
(xlstm_config.py)."""

from .recurrent_gemma_config import (
    RECURRENT_GEMMA_ARCHITECTURES,
    RECURRENT_GEMMA_MODEL_TYPES,
    recurrent_gemma_fields,
    with_recurrent_gemma,
)
from .rwkv_config import RWKV_ARCHITECTURES, RWKV_MODEL_TYPES, rwkv_fields, with_rwkv
from .xlstm_config import XLSTM_ARCHITECTURES, XLSTM_MODEL_TYPES, with_xlstm, xlstm_fields
from .zamba_config import ZAMBA_ARCHITECTURES, ZAMBA_MODEL_TYPES, with_zamba, zamba_fields

RNN_ARCHITECTURES = ZAMBA_ARCHITECTURES + RECURRENT_GEMMA_ARCHITECTURES + RWKV_ARCHITECTURES + XLSTM_ARCHITECTURES
RNN_MODEL_TYPES = {**ZAMBA_MODEL_TYPES, **RECURRENT_GEMMA_MODEL_TYPES, **RWKV_MODEL_TYPES, **XLSTM_MODEL_TYPES}
_FIELDS = {"ZambaForCausalLM": zamba_fields, "RecurrentGemmaForCausalLM": recurrent_gemma_fields,
           "RwkvForCausalLM": rwkv_fields, "xLSTMForCausalLM": xlstm_fields}
_READERS = {"ZambaForCausalLM": with_zamba, "RecurrentGemmaForCausalLM": with_recurrent_gemma,
            "RwkvForCausalLM": with_rwkv, "xLSTMForCausalLM": with_xlstm}


def rnn_hf_fields(arch: str, hf_config):
    """hf_config as from_hf reads its common fields."""
    return _FIELDS[arch](hf_config)


def with_rnn(config, view):
    """ModelConfig `config` with its family's recurrent fields; ValueError naming a field the layers do not run."""
    return _READERS[config.architecture](config, view)
