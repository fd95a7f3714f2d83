"""The Hugging Face config fields of the multi-head latent attention (MLA) families, DeepSeek-V2, DeepSeek-V3 (Kimi
K2, Moonlight, DeepSeek-R1), GLM-4.7-Flash (Glm4MoeLite), Youtu-LLM (V3's attention, dense MLPs), A.X K1 (V3's
layout: assembled.py), the sparse-attention DeepSeek-V3.2, GLM-5 and A.X K2 (their own fields: dsa_config.py),
Mistral 4 (V3's layout with Llama 4's query scaling, config.query_scale, and softmax routing: moe_config.py; its
partial_rotary_factor names qk_rope_head_dim of its head_dim) and MiniCPM3 (rotate-half rope, dense MLPs, and its
three scalings as Granite's fields: embeddings times scale_emb, each sublayer's output times scale_depth /
sqrt(layers), logits divided by hidden_size / dim_model_base), as ModelConfig fields.

No torch here (config.py's rule).  The KV pool and the attention kernels see MLA in its absorbed form (mla.py): one
"kv head" per token of width qk_rope_head_dim + kv_lora_rank, queries of the same width on every query head, so
with_mla sets num_kv_heads 1, head_dim to that width, rotary_dim to qk_rope_head_dim (the first dims of each head
rotate) and the score scale to HF's qk_head_dim ** -0.5, times YaRN's mscale(factor, mscale_all_dim) squared.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from .dsa_config import DSA_ARCHITECTURES, DSA_MODEL_TYPES, with_sparse_attention
from .mistral_large4_config import MISTRAL_LARGE4_TEXT, with_mistral_large4

MLA_ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM", "MiniCPM3ForCausalLM",
                     "YoutuForCausalLM", "AXK1ForCausalLM", "Mistral4ForCausalLM") + DSA_ARCHITECTURES
MLA_ARCHITECTURES += ("LongcatFlashForCausalLM",)   # its model type and layout: longcat_flash_config.py
MLA_ARCHITECTURES += (MISTRAL_LARGE4_TEXT,)   # its model type and layout: mistral_large4_config.py
MLA_MODEL_TYPES = {"deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                   "glm4_moe_lite": "Glm4MoeLiteForCausalLM", "minicpm3": "MiniCPM3ForCausalLM",
                   "youtu": "YoutuForCausalLM", "axk1": "AXK1ForCausalLM", "mistral4": "Mistral4ForCausalLM",
                   **DSA_MODEL_TYPES}
# whose HF attention always rotates interleaved pairs (DeepSeek-V2 as complex numbers); no rope_interleave field
_ALWAYS_INTERLEAVED = ("DeepseekV2ForCausalLM", "LongcatFlashForCausalLM", MISTRAL_LARGE4_TEXT) + DSA_ARCHITECTURES


@dataclass(frozen=True)
class MLAConfig:
    """One MLA layer's shapes (every layer's) and whether the checkpoint rotates interleaved pairs (which layers have
    a mixture-of-experts MLP: ModelConfig.moe, moe_config.py)."""

    q_lora_rank: Optional[int]   # None: q_proj straight from the hidden states (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope_interleave: bool

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dim(self) -> int:
        """The width of one cached token of one layer: its rotated k_pe, then its normed latent."""
        return self.qk_rope_head_dim + self.kv_lora_rank


def with_mla(config, hf_config):
    """config (a ModelConfig read from hf_config by the generic fields) with the MLA fields and the absorbed form's
    attention shape.  ValueError for what we do not run."""
    arch = config.architecture
    if getattr(hf_config, "attention_bias", False):
        raise ValueError(f"{arch}: attention_bias=True is not supported")
    mla = MLAConfig(
        q_lora_rank=int(hf_config.q_lora_rank) if getattr(hf_config, "q_lora_rank", None) else None,
        kv_lora_rank=int(hf_config.kv_lora_rank), qk_nope_head_dim=int(hf_config.qk_nope_head_dim),
        qk_rope_head_dim=int(hf_config.qk_rope_head_dim), v_head_dim=int(hf_config.v_head_dim),
        rope_interleave=arch in _ALWAYS_INTERLEAVED or (arch != "MiniCPM3ForCausalLM" and
                                                         bool(getattr(hf_config, "rope_interleave", True))))
    if config.rope_dim != mla.qk_rope_head_dim:
        raise ValueError(f"{arch}: rotary embeddings over {config.rope_dim} dims, expected qk_rope_head_dim "
                         f"{mla.qk_rope_head_dim} (partial_rotary_factor is not supported)")
    scalings = _minicpm3_scalings(hf_config) if arch == "MiniCPM3ForCausalLM" else {}
    config = dataclasses.replace(config, num_kv_heads=1, head_dim=mla.cache_dim, rotary_dim=mla.qk_rope_head_dim,
                                 attention_multiplier=mla.qk_head_dim ** -0.5 * _mscale_squared(hf_config), mla=mla,
                                 **scalings)
    if arch == MISTRAL_LARGE4_TEXT:
        return with_mistral_large4(config, hf_config)
    return with_sparse_attention(config, hf_config) if arch in DSA_ARCHITECTURES else config


def _minicpm3_scalings(hf_config) -> dict:
    """HF MiniCPM3Config's scalings (its __post_init__ turns a None into the no-op value)."""
    layers, hidden = int(hf_config.num_hidden_layers), int(hf_config.hidden_size)
    depth = float(hf_config.scale_depth if hf_config.scale_depth is not None else math.sqrt(layers))
    base = int(hf_config.dim_model_base or hidden)
    return dict(embedding_multiplier=float(hf_config.scale_emb), residual_multiplier=depth / math.sqrt(layers),
                logits_scaling=hidden / base)


def _mscale_squared(hf_config) -> float:
    """HF yarn_apply_mscale: with a scaled rope and mscale_all_dim set, scores also scale by
    (0.1 mscale_all_dim ln(factor) + 1) ** 2 (1 where factor <= 1)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})
    rope_type = params.get("rope_type") or params.get("type") or "default"
    m_all, factor = params.get("mscale_all_dim"), params.get("factor")
    if rope_type == "default" or not m_all or factor is None or factor <= 1:
        return 1.0
    return (0.1 * float(m_all) * math.log(float(factor)) + 1.0) ** 2
