"""Phi (HF PhiForCausalLM: phi-1, phi-1.5, phi-2): parallel blocks (parallel_block.py) whose LayerNorms have biases,
biases on q/k/v and on the output projection (HF `dense`), a non-gated MLP fc1 -> gelu-tanh (HF gelu_new) -> fc2
with biases, partial rotary embeddings (config.rotary_dim), optional q/k LayerNorms (qk_layernorm: one [D] weight and
bias shared by the heads), a final LayerNorm and an lm head with a bias.
Notation as in llama.py: T tokens, H hidden, I intermediate.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig

from .layers import param
from .packed_linear import linear
from .parallel_block import ParallelBlockForCausalLM

# our weight names (llama.py's) -> Phi's checkpoint names
_RENAMES = ((".self_attn.o_proj.", ".self_attn.dense."), (".self_attn.q_norm.", ".self_attn.q_layernorm."),
            (".self_attn.k_norm.", ".self_attn.k_layernorm."), ("model.norm.", "model.final_layernorm."))


class PhiMLP(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.fc1 = param(c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [I, H]
        self.fc1_bias = param(c.intermediate_size, dtype=dtype, device=device)  # [I]
        self.fc2 = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.fc2_bias = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.gemm_rows: Optional[int] = None  # see LlamaForCausalLM.make_batch_invariant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        h = F.gelu(linear(x, self.fc1, self.fc1_bias, self.gemm_rows), approximate="tanh")  # [T, I]
        return linear(h, self.fc2, self.fc2_bias, self.gemm_rows)  # [T, H]


class PhiForCausalLM(ParallelBlockForCausalLM):
    NORM_BIAS = True
    LM_HEAD_BIAS = True
    loads_fp8_checkpoints = False  # fp8_model.py's layouts name a gated MLP, not fc1/fc2
    quantizes_to_fp8 = False       # nor does its quantize-at-load know them (the MLP would stay dense)
    MLP_LINEARS = ("fc1", "fc2")

    def make_mlp(self, dtype, device) -> nn.Module:
        return PhiMLP(self.config, dtype, device)

    def _weight_targets(self) -> dict:
        t = {}
        for name, target in super()._weight_targets().items():
            for ours, phi in _RENAMES:
                name = name.replace(ours, phi)
            t[name] = target
        t["model.final_layernorm.bias"] = (self.final_bias, False)
        t["lm_head.bias"] = (self.lm_head_bias, False)
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        t, attn, hq = super()._norm_targets(prefix, layer), layer.self_attn, self.config.num_heads
        if attn.qk_bias is not None:
            t[prefix + "self_attn.q_layernorm.bias"] = (attn.qk_bias[:hq], True)
            t[prefix + "self_attn.k_layernorm.bias"] = (attn.qk_bias[hq:], True)
        return t

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        p = f"model.layers.{layer_id}.mlp."
        return {p + "fc1.weight": (mlp.fc1, False), p + "fc1.bias": (mlp.fc1_bias, False),
                p + "fc2.weight": (mlp.fc2, False), p + "fc2.bias": (mlp.fc2_bias, False)}
