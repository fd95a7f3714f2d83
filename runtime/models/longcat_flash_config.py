"""LongCat-Flash's fields (HF LongcatFlashForCausalLM), as ModelConfig fields (family_config.py's contract).  No torch.

Each of its num_layers layers holds two MLA sublayers (DeepSeek-V3's attention, interleaved rope: mla_config.py;
their queries times sqrt(hidden / q_lora_rank), their latents times sqrt(hidden / kv_lora_rank)), two dense SwiGLU
MLPs of ffn_hidden_size and one mixture of experts fed from the first MLP's input, whose output joins the residual
stream at the layer's end.  num_hidden_layers (2 * num_layers) counts the KV layers, as ModelConfig.num_layers does.

The mixture routes by a float32 softmax over n_routed_experts + zero_expert_num logits, the experts chosen by the
scores plus e_score_correction_bias, weighted by the unbiased scores (not renormalised) times routed_scaling_factor;
the zero-computation experts (ids from n_routed_experts on) return their input.
"""

from dataclasses import dataclass
from typing import Any, Dict

from .moe_config import MoEConfig


@dataclass(frozen=True)
class LongcatLayout:
    moe: MoEConfig        # num_experts counts the zero experts too; num_local_experts the real ones
    q_scale: float        # sqrt(hidden / q_lora_rank): every query dim
    latent_scale: float   # sqrt(hidden / kv_lora_rank): the normed latent, so keys and values

    @property
    def real_experts(self) -> int:
        return self.moe.local_experts


def _longcat_flash(arch: str, hf_config) -> Dict[str, Any]:
    hidden, q_rank = int(hf_config.hidden_size), getattr(hf_config, "q_lora_rank", None)
    if not q_rank:
        raise ValueError(f"{arch}: q_lora_rank is required (its queries are scaled by hidden / q_lora_rank)")
    if getattr(hf_config, "router_bias", False):
        raise ValueError(f"{arch}: router_bias=True is not supported")
    nope, rope = int(hf_config.qk_nope_head_dim), int(hf_config.qk_rope_head_dim)
    if int(getattr(hf_config, "qk_head_dim", None) or nope + rope) != nope + rope:
        raise ValueError(f"{arch}: qk_head_dim {hf_config.qk_head_dim} must be qk_nope_head_dim + qk_rope_head_dim")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"{arch}: only the silu activation is supported, got {hf_config.hidden_act!r}")
    experts, zero = int(hf_config.n_routed_experts), int(hf_config.zero_expert_num or 0)
    moe = MoEConfig(num_experts=experts + zero, num_local_experts=experts, top_k=int(hf_config.moe_topk),
                    intermediate_size=int(hf_config.expert_ffn_hidden_size), norm_topk_prob=False,
                    sparse_layers=tuple(range(int(hf_config.num_layers))), scoring="softmax", correction_bias=True,
                    routed_scaling_factor=float(hf_config.routed_scaling_factor), router_float32=True)
    if not 1 <= moe.top_k <= moe.num_experts:
        raise ValueError(f"{arch}: moe_topk {moe.top_k} must be 1..{moe.num_experts}")
    layout = LongcatLayout(moe=moe, q_scale=(hidden / int(q_rank)) ** 0.5,
                           latent_scale=(hidden / int(hf_config.kv_lora_rank)) ** 0.5)
    return dict(intermediate_size=int(hf_config.ffn_hidden_size), longcat=layout)


LONGCAT_FIELDS = {"LongcatFlashForCausalLM": _longcat_flash}
LONGCAT_MODEL_TYPES = {"longcat_flash": "LongcatFlashForCausalLM"}
