"""The Hugging Face config fields of the newer mixture-of-experts families HF assembles from DeepSeek, Qwen3-MoE and
GLM-4-MoE pieces, as ModelConfig fields (family_config.py's contract: each reader returns the keyword arguments
ModelConfig.from_hf adds or overrides).  Their experts are read by moe_config.py.  No torch here.

MiniCPM 5 MoE (MiniCPM5MoeForCausalLM): Llama's attention whose q projection also gives each head a sigmoid output
gate (use_gated_attention, which HF requires), DeepSeek-V3's routing, dense layers by mlp_layer_types.
Kolibri 1 (Kolibri1ForCausalLM): EXAONE 4's attention (per-head q/k norms; the full-attention layers of a windowed
model without rope) in GLM-4's four-norm layer, experts in every layer (moe_config.py).
Hy3 (HYV3ForCausalLM): Apertus's attention (per-head q/k norms before rope, attention_bias on all four projections)
in Llama's layer, DeepSeek-V3's sigmoid routing without groups, dense layers by mlp_layer_types.
"""

from typing import Any, Dict

from .llama_like_config import _exaone4

NEWER_MOE_MODEL_TYPES = {"minicpm5_moe": "MiniCPM5MoeForCausalLM", "kolibri1": "Kolibri1ForCausalLM",
                         "hy_v3": "HYV3ForCausalLM"}
# the names released checkpoints give architectures that transformers spells otherwise
NEWER_MOE_ALIASES = {"MiniCPM5MoEForCausalLM": "MiniCPM5MoeForCausalLM"}


def _minicpm5_moe(arch: str, hf_config) -> Dict[str, Any]:
    if getattr(hf_config, "use_gated_attention", True) is False:
        raise ValueError(f"{arch}: use_gated_attention=False is not supported (HF's MiniCPM5Moe refuses it too)")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    return {}


def _kolibri1(arch: str, hf_config) -> Dict[str, Any]:
    """EXAONE 4's attention fields (its sliding layers are read by config.py from layer_types)."""
    return _exaone4(arch, hf_config)


def _hy_v3(arch: str, hf_config) -> Dict[str, Any]:
    return dict(qk_norm=True, o_proj_bias=bool(getattr(hf_config, "attention_bias", False)))


NEWER_MOE_FIELDS = {"MiniCPM5MoeForCausalLM": _minicpm5_moe, "Kolibri1ForCausalLM": _kolibri1,
                    "HYV3ForCausalLM": _hy_v3}
