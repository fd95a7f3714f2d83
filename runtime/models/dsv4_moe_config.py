"""The experts of Ergo, Beam, Dots 3 Note and Hy V4 as MoEConfig fields (moe_config.py calls each reader with its
class and DeepSeek-V3's reader; no torch here).

Ergo: a float32 router, sigmoid scores, e_score_correction_bias for the choice only, no groups, weights always
  renormalised, times moe_routed_scaling_factor; the sparse layers of mlp_layer_types, a shared expert of
  shared_intermediate_size (relu^2 experts with their output norms: ergo.py).
Beam: DeepSeek-V3's routing (a float32 router, sigmoid, e_score_correction_bias for the choice, groups scored by their
  two best), renormalised when norm_topk_prob, times routed_scaling_factor; the sparse layers of mlp_layer_types, no
  shared expert.
MiniMax-M3's language model: minimax_m3_config.py.
Dots 3 Note and Hy V4: DeepSeek-V3's (moe_config.py), Dots' n_shared_experts shared experts each
  shared_experts_intermediate_size wide (Hy V4's experts clamp their SwiGLU: hy_v4.py).
"""

import dataclasses

from . import minimax_m3_config


def _ergo(cls, hf_config, deepseek_style):
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=True,
               sparse_layers=tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse"),
               shared_expert_intermediate_size=int(hf_config.shared_intermediate_size), shared_expert_gate=False,
               scoring="sigmoid", correction_bias=True, router_float32=True,
               routed_scaling_factor=float(hf_config.moe_routed_scaling_factor))


def _beam(cls, hf_config, deepseek_style):
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=bool(hf_config.norm_topk_prob),
               sparse_layers=tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse"),
               scoring="sigmoid", correction_bias=True, n_group=int(hf_config.n_group or 1),
               topk_group=int(hf_config.topk_group or 1), router_float32=True,
               routed_scaling_factor=float(hf_config.routed_scaling_factor))


def _dots3(cls, hf_config, deepseek_style):
    moe = deepseek_style(cls, hf_config, "Dots3NoteForCausalLM")
    shared = int(hf_config.shared_experts_intermediate_size) * int(hf_config.n_shared_experts or 0)
    return dataclasses.replace(moe, shared_expert_intermediate_size=shared)


def _hy_v4(cls, hf_config, deepseek_style):
    return deepseek_style(cls, hf_config, "HYV4ForCausalLM")


DSV4_MOE_READERS = {"ErgoForCausalLM": _ergo, "BeamForCausalLM": _beam, "Dots3NoteForCausalLM": _dots3,
                    "HYV4ForCausalLM": _hy_v4, minimax_m3_config.ARCH: minimax_m3_config.moe_reader}
