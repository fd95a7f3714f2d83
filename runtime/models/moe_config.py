"""MoEConfig: the mixture-of-experts numbers of a Hugging Face config, read once (no torch here).

Routing, as each family's HF code does it: softmax over all experts' router logits (float32), keep the top
k, renormalise them to sum to 1 when `norm_topk_prob` (Mixtral always: the same as a softmax over the top-k
logits; Qwen2/Qwen3-MoE as configured).  A layer is sparse unless it is in `mlp_only_layers` or
(layer + 1) % decoder_sparse_step != 0 (Qwen); sparse layers of Qwen2-MoE add a shared expert scaled by
sigmoid(shared_expert_gate(x)).  gpt-oss: a router with a bias, top k of its logits then a softmax over those k
(the same weights as a softmax over all then renormalised), experts with biases and a clamped SwiGLU
(swiglu_limit / swiglu_alpha, gpt_oss.py), every layer sparse.
"""

from dataclasses import dataclass
from typing import Optional

MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM")


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    intermediate_size: int            # of one expert
    norm_topk_prob: bool
    sparse_layers: tuple              # indices of the layers with experts; the others have a dense MLP
    shared_expert_intermediate_size: int = 0   # Qwen2-MoE; 0: no shared expert
    # expert parallelism (distributed/sharding.py): this rank holds experts expert_offset..+num_local_experts-1
    expert_offset: int = 0
    num_local_experts: Optional[int] = None    # None: all of them
    swiglu_limit: Optional[float] = None       # gpt-oss: the clamp of its SwiGLU (None: plain silu(gate) * up)
    swiglu_alpha: float = 1.702                # gpt-oss: gate * sigmoid(alpha * gate)

    @property
    def local_experts(self) -> int:
        return self.num_experts if self.num_local_experts is None else self.num_local_experts

    @classmethod
    def from_hf(cls, hf_config, arch: str) -> "MoEConfig":
        """ValueError for a top k outside 1..num_experts."""
        num_layers = int(hf_config.num_hidden_layers)
        limit = None
        if arch in ("MixtralForCausalLM", "GptOssForCausalLM"):
            experts, inter, norm = int(hf_config.num_local_experts), int(hf_config.intermediate_size), True
            sparse = tuple(range(num_layers))
            if arch == "GptOssForCausalLM":
                limit = float(hf_config.swiglu_limit)
        else:
            experts = int(getattr(hf_config, "num_experts", None) or hf_config.num_local_experts)
            inter, norm = int(hf_config.moe_intermediate_size), bool(hf_config.norm_topk_prob)
            dense_only = set(getattr(hf_config, "mlp_only_layers", None) or ())
            step = int(getattr(hf_config, "decoder_sparse_step", 1) or 1)
            sparse = tuple(i for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0)
        top_k = int(hf_config.num_experts_per_tok)
        if not 1 <= top_k <= experts:
            raise ValueError(f"{arch}: num_experts_per_tok {top_k} must be in 1..{experts} (the experts)")
        shared = int(getattr(hf_config, "shared_expert_intermediate_size", 0) or 0)
        if arch != "Qwen2MoeForCausalLM":
            shared = 0
        return cls(num_experts=experts, top_k=top_k, intermediate_size=inter, norm_topk_prob=norm,
                   sparse_layers=sparse, shared_expert_intermediate_size=shared, swiglu_limit=limit,
                   swiglu_alpha=float(getattr(hf_config, "swiglu_alpha", 1.702) or 1.702))
