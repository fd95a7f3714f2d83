"""Where more_recurrent_config.py reads the recurrent families of the "rnn" group (no torch): ZambaForCausalLM
(zamba_config.py)."""

from .zamba_config import ZAMBA_ARCHITECTURES, ZAMBA_MODEL_TYPES, with_zamba, zamba_fields

RNN_ARCHITECTURES = ZAMBA_ARCHITECTURES
RNN_MODEL_TYPES = {**ZAMBA_MODEL_TYPES}


def rnn_hf_fields(arch: str, hf_config):
    """hf_config as from_hf reads its common fields."""
    return zamba_fields(hf_config)


def with_rnn(config, view):
    """ModelConfig `config` with its family's recurrent fields; ValueError naming a field the layers do not run."""
    return with_zamba(config, view)
