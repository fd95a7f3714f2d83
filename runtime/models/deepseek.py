"""DeepSeek-V2 / V3 (Kimi K2, Moonlight, DeepSeek-R1), GLM-4.7-Flash and Mistral 4 (HF DeepseekV2ForCausalLM,
DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, Mistral4ForCausalLM): pre-norm layers of multi-head latent attention
(mla.py; Mistral 4's queries scaled by position as Ministral 3's, rope.query_scale) and an MLP.

The layers differ from Llama's in their attention only.  A layer's MLP comes from _make_mlp: the dense SwiGLU MLP
below first_k_dense_replace (GLM-4.7-Flash: mlp_layer_types "dense"), a SparseMoeBlock (moe.py) with DeepSeek's
routing (moe_config.py: V3's sigmoid with the correction bias and groups, V2's softmax, Mistral 4's softmax in V3's
groups) and un-gated shared experts in the sparse layers.  Checkpoints that rotate interleaved pairs (DeepSeek-V2 always, V3 and GLM by
rope_interleave) get the rope rows of q and k_pe reordered at load (interleaved_rope.py), and layers past
num_hidden_layers (DeepSeek-V3's multi-token-prediction layer 61) are skipped, as HF does.  No tensor parallelism,
FP8 (checkpoints or quantize-at-load), GGUF weights kept quantized, --deterministic or native one-call decode.
Notation as in llama.py and mla.py.
"""

import re
from typing import Iterable, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaMLP
from .mla import MLAAttention
from .moe import SparseMoeBlock
from .moe_model import ExpertLayers
from .multimodal_text import split_stacked_experts
from .own_layers import OwnLayersForCausalLM
from .rope import query_scale

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


class DeepseekDecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x))."""

    attention_class = MLAAttention   # dsa.py: A.X K2's

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, mlp: nn.Module, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attn = self.attention_class(c, layer_id, attn_backend, dtype, device)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), rotary, fb)  # [T, H]
        return x + self.mlp(rms_norm(x, self.post_attention_layernorm, self.eps))  # [T, H]


class DeepseekForCausalLM(ExpertLayers, OwnLayersForCausalLM):
    """OwnLayersForCausalLM's contract with MLA layers; the pool holds config.head_dim = R + C per token and layer.
    expert_load() as MoEForCausalLM's."""

    LAYER_KIND = "multi-head latent attention"
    loads_fp8_checkpoints = False  # DeepSeek's block-quantized FP8 checkpoints are not in fp8_model.py's layouts
    quantizes_to_fp8 = False

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return DeepseekDecoderLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device),
                                    dtype, device)

    def _make_mlp(self, layer_id: int, dtype, device) -> nn.Module:
        """Layer `layer_id`'s MLP: the mixture of experts in a sparse layer, else the dense SwiGLU one."""
        c = self.config
        if c.moe is not None and layer_id in c.moe.sparse_layers:
            return SparseMoeBlock(c.hidden_size, c.moe, dtype, device)
        return LlamaMLP(c, dtype, device)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    def layer_rotaries(self, positions: torch.Tensor) -> list:
        """Every layer's Rotary, with Mistral 4's query scale where the config has one."""
        return [Rotary(positions, self.cos_sin, query_scale(self.config, positions, self.dtype))] * len(self.layers)

    def make_batch_invariant(self, gemm_rows: int) -> None:
        raise ValueError(f"{self.config.architecture}: --deterministic is not supported (the absorbed per-head "
                         "projections run as batched GEMMs whose blocking follows the batch)")

    @property
    def quantized(self) -> bool:
        return False

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            attn = layer.self_attn
            swaps += [(attn, "qkv_a_proj"), (attn, "o_proj")] + ([(attn, "q_b_proj")] if attn.q_b_proj is not None else [])
            if not isinstance(layer.mlp, SparseMoeBlock):
                swaps += [(layer.mlp, name) for name in self.MLP_LINEARS]
            elif layer.mlp.shared_gate_up is not None:
                swaps += [(layer.mlp, "shared_gate_up"), (layer.mlp, "shared_down")]
        return swaps

    def _weight_targets(self) -> dict:
        """HF name -> (destination tensor view, broadcast allowed)."""
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p, attn = f"model.layers.{i}.", layer.self_attn
            t.update(self._norm_targets(p, layer))
            t.update(mla_targets(p + "self_attn.", attn))
            if isinstance(layer.mlp, SparseMoeBlock):
                t.update(layer.mlp.checkpoint_targets(p + "mlp."))
            else:
                t.update(self._mlp_targets(i, layer.mlp))
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        return mla_checkpoint_tensors(named_tensors, self.config)

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """LlamaForCausalLM.load_weights on checkpoint_tensors(named_tensors)."""
        super().load_weights(self.checkpoint_tensors(named_tensors))


def mla_targets(a: str, attn: MLAAttention) -> dict:
    """HF name -> (destination, broadcast allowed) of one MLA layer's weights under `a` ("model.layers.3.self_attn.")."""
    q_rows, low_rank = attn.q_rows, attn.q_a_layernorm is not None
    t = {a + ("q_a_proj.weight" if low_rank else "q_proj.weight"): (attn.qkv_a_proj[:q_rows], False),
         a + "kv_a_proj_with_mqa.weight": (attn.qkv_a_proj[q_rows:], False),
         a + "kv_a_layernorm.weight": (attn.kv_a_layernorm, False),
         a + "kv_b_proj.weight": (attn.kv_b_proj.flatten(0, 1), False),  # [Hq*(N+Vd), C] view
         a + "o_proj.weight": (attn.o_proj, False)}
    if low_rank:
        t[a + "q_a_layernorm.weight"] = (attn.q_a_layernorm, False)
    if attn.q_b_proj is not None:
        t[a + "q_b_proj.weight"] = (attn.q_b_proj, False)
    return t


def mla_checkpoint_tensors(named_tensors: Iterable[Tuple[str, torch.Tensor]], c: ModelConfig):
    """The checkpoint stream without layers past num_hidden_layers, with the rope rows of q and k_pe in rotate-half
    order where the checkpoint rotates interleaved pairs, and experts stacked as transformers 5 saves them (Mistral 4)
    split into DeepSeek's per-expert weights."""
    m = c.mla
    rope = interleaved_to_half_order(m.qk_rope_head_dim, m.qk_rope_head_dim)
    q_order = torch.cat([torch.arange(m.qk_nope_head_dim), m.qk_nope_head_dim + rope])  # [N+R]
    kv_order = torch.cat([torch.arange(m.kv_lora_rank), m.kv_lora_rank + rope])  # [C+R]
    for name, tensor in named_tensors:
        layer = _LAYER.match(name)
        if layer is not None and int(layer.group(1)) >= c.num_layers:
            continue
        if m.rope_interleave and name.endswith(("self_attn.q_b_proj.weight", "self_attn.q_proj.weight")):
            tensor = reorder_head_dims(name, tensor, q_order)  # [Hq*(N+R), Q or H]
        elif m.rope_interleave and name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
            tensor = reorder_head_dims(name, tensor, kv_order)  # [C+R, H]
        yield from split_stacked_experts(name, tensor, c)
