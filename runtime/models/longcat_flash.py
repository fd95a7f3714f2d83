"""LongCat-Flash (HF LongcatFlashForCausalLM): each layer two MLA sublayers (mla.py, DeepSeek-V3's attention) each
followed by a dense SwiGLU MLP, and a shortcut mixture of experts with zero-computation experts
(longcat_flash_config.py) that reads the first MLP's input and joins the residual stream at the layer's end:
  h = x + attn0(n(x));  m = n'(h);  s = moe(m);  h = h + mlp0(m);  h = h + attn1(n(h));  out = h + mlp1(n'(h)) + s.
The KV pool holds two layers per layer (sublayer j of layer i: KV layer 2i + j).  MLA's query and latent scales are
folded into q_b_proj and kv_a_layernorm at load; the rope rows are reordered as DeepSeek's (deepseek.py).  The
multi-token-prediction weights (model.mtp.*) are skipped, as HF does.  One rank; the restrictions of deepseek.py.
"""

import dataclasses
import re
from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekForCausalLM, mla_targets
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary, rms_norm
from .layers import param
from .llama import LlamaMLP
from .mla import MLAAttention
from .moe import SparseMoeBlock
from .multimodal_text import split_stacked_experts

_SUBLAYER = re.compile(r"model\.layers\.\d+\.self_attn\.\d\.(q_b_proj|kv_a_proj_with_mqa|kv_a_layernorm)\.weight$")


class ZeroExpertMoeBlock(SparseMoeBlock):
    """SparseMoeBlock over the real experts; a token's weights on the zero experts scale its input instead."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        weights, ids = self.choose(x)  # [T, k] each
        identity = weights.masked_fill(ids < self.moe.local_experts, 0.0).sum(dim=-1, keepdim=True)  # [T, 1] float32
        return self.experts_out(x, weights, ids) + (x * identity).to(x.dtype)  # [T, H]


class LongcatFlashLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        self.input_layernorm = param(2, c.hidden_size, dtype=dtype, device=device)  # [2, H]
        self.post_attention_layernorm = param(2, c.hidden_size, dtype=dtype, device=device)  # [2, H]
        self.self_attn = nn.ModuleList(MLAAttention(c, 2 * layer_id + j, attn_backend, dtype, device) for j in (0, 1))
        self.mlps = nn.ModuleList(LlamaMLP(c, dtype, device) for _ in (0, 1))
        self.mlp = ZeroExpertMoeBlock(c.hidden_size, c.longcat.moe, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        x = x + self.self_attn[0](rms_norm(x, self.input_layernorm[0], self.eps), rotary, fb)  # [T, H]
        m = rms_norm(x, self.post_attention_layernorm[0], self.eps)  # [T, H]
        shortcut = self.mlp(m)  # [T, H]
        x = x + self.mlps[0](m)  # [T, H]
        x = x + self.self_attn[1](rms_norm(x, self.input_layernorm[1], self.eps), rotary, fb)  # [T, H]
        return x + self.mlps[1](rms_norm(x, self.post_attention_layernorm[1], self.eps)) + shortcut  # [T, H]


class LongcatFlashForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM's contract; self.layers: the checkpoint's layers; config.num_layers: the KV layers."""

    LAYER_KIND = "dual-sublayer shortcut-MoE"

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__(dataclasses.replace(config, num_layers=config.num_layers // 2), attn_backend, dtype=dtype,
                         device=device, max_context=max_context)
        self.config = config

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        return LongcatFlashLayer(self.config, layer_id, attn_backend, dtype, device)

    def _linear_weights(self) -> list:
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            for attn in layer.self_attn:
                swaps += [(attn, "qkv_a_proj"), (attn, "q_b_proj"), (attn, "o_proj")]
            swaps += [(mlp, name) for mlp in layer.mlps for name in self.MLP_LINEARS]
        return swaps

    def _weight_targets(self) -> dict:
        """HF name -> (destination tensor view, broadcast allowed)."""
        t = self._outer_targets()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            for j in (0, 1):
                t.update(mla_targets(f"{p}self_attn.{j}.", layer.self_attn[j]))
                t[f"{p}input_layernorm.{j}.weight"] = (layer.input_layernorm[j], False)
                t[f"{p}post_attention_layernorm.{j}.weight"] = (layer.post_attention_layernorm[j], False)
                mlp, inter = layer.mlps[j], layer.mlps[j].down_proj.shape[1]
                t.update({f"{p}mlps.{j}.gate_proj.weight": (mlp.gate_up_proj[:inter], False),
                          f"{p}mlps.{j}.up_proj.weight": (mlp.gate_up_proj[inter:], False),
                          f"{p}mlps.{j}.down_proj.weight": (mlp.down_proj, False)})
            moe = layer.mlp.checkpoint_targets(p + "mlp.", bias_name="router.e_score_correction_bias")
            moe[p + "mlp.router.classifier.weight"] = moe.pop(p + "mlp.gate.weight")
            t.update(moe)
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream without model.mtp.*, the MLA scales folded in, the rope rows in rotate-half order and
        the stacked experts split per expert."""
        c = self.config
        experts_view = dataclasses.replace(c, moe=c.longcat.moe)
        for name, tensor in named_tensors:
            if name.startswith("model.mtp."):
                continue
            sublayer = _SUBLAYER.search(name)
            if sublayer is not None:
                tensor = self._sublayer_tensor(sublayer.group(1), name, tensor)
            yield from split_stacked_experts(name, tensor, experts_view)

    def _sublayer_tensor(self, kind: str, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """One MLA weight as mla.py reads it: q_b_proj times q_scale, kv_a_layernorm times latent_scale, the rope
        rows of q and k_pe from interleaved pairs to rotate-half order."""
        m, layout = self.config.mla, self.config.longcat
        if kind == "kv_a_layernorm":
            return tensor * layout.latent_scale  # [C]
        rope = (interleaved_to_half_order(m.qk_rope_head_dim, m.qk_rope_head_dim) if m.rope_interleave
                else torch.arange(m.qk_rope_head_dim))  # [R]
        if kind == "kv_a_proj_with_mqa":
            return reorder_head_dims(name, tensor, torch.cat([torch.arange(m.kv_lora_rank), m.kv_lora_rank + rope]))
        order = torch.cat([torch.arange(m.qk_nope_head_dim), m.qk_nope_head_dim + rope])  # [N+R]
        return reorder_head_dims(name, tensor, order) * layout.q_scale  # [Hq*(N+R), Q]
