"""Dots 3 Note's text model (HF Dots3NoteForCausalLM; fields: dots3_config.py): DeepSeek-V3.2's layers (deepseek.py,
the indexers' weights dropped as dsa.py drops them) with MLA shapes of their own per layer type, the sliding layers'
windows and rope (LayerTypeRopes), and Dots' attention: q and kv latents normed then times sqrt(hidden / rank), the
rope key RMSNormed before it rotates, each head's output times sigmoid(g_proj(x)), scores scaled by the layer's own
qk_head_dim ** -0.5.  Every layer's cached [k_pe | latent] is zero-padded to the pool's one width (config.head_dim),
and so are its queries.  Multi-token-prediction weights (model.mtp.*, layers past num_hidden_layers) are skipped.
Notation as in mla.py; W the pool's width.
"""

import dataclasses
import re
from typing import Iterable, Tuple

import torch
import torch.nn.functional as F

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .laguna import LayerTypeRopes
from .layer_ops import Rotary, rms_norm
from .layers import param
from .mla import MLAAttention
from .packed_linear import linear

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


class Dots3Attention(MLAAttention):
    def __init__(self, config: ModelConfig, layer_id: int, attn_backend, dtype, device):
        layers = config.dots3
        c = dataclasses.replace(config, num_heads=layers.heads[layer_id], mla=layers.shapes[layer_id])
        super().__init__(c, layer_id, attn_backend, dtype, device)
        m, self.eps, self.width = c.mla, c.rms_norm_eps, config.head_dim
        self.k_rope_norm = param(m.qk_rope_head_dim, dtype=dtype, device=device)  # [R]
        self.g_proj = param(c.num_heads, c.hidden_size, dtype=dtype, device=device)  # [Hq, H]
        self.q_scale, self.kv_scale = (c.hidden_size / m.q_lora_rank) ** 0.5, (c.hidden_size / m.kv_lora_rank) ** 0.5
        self.score_ratio = m.qk_head_dim ** -0.5 / config.sm_scale   # the kernels scale by the pool's one sm_scale

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's [k_pe | latent], zero-padded to W, into the pool."""
        T, hq, m = x.shape[0], self.num_heads, self.m
        q, latent, k_pe = linear(x, self.qkv_a_proj).split([self.q_rows, m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
        q = linear(rms_norm(q, self.q_a_layernorm, self.eps) * self.q_scale, self.q_b_proj).view(T, hq, -1)
        q_nope, q_pe = q.split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)  # [T, Hq, N], [T, Hq, R]
        w_uk, w_uv = self.kv_b_proj.split([m.qk_nope_head_dim, m.v_head_dim], dim=1)  # [Hq, N, C], [Hq, Vd, C]
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [T, Hq, C]
        kv = torch.cat((rms_norm(k_pe, self.k_rope_norm, self.eps),
                        rms_norm(latent, self.kv_a_layernorm, self.eps) * self.kv_scale), dim=-1)  # [T, R + C]
        qk = rotary.apply_(torch.cat((torch.cat((q_pe, q_latent), dim=-1), kv.unsqueeze(1)), dim=1))  # [T, Hq+1, R+C]
        qk = F.pad(torch.cat((qk[:, :hq] * self.score_ratio, qk[:, hq:]), dim=1), (0, self.width - qk.shape[-1]))
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qk[:, hq:], self.layer_id, fb)  # [T, Hq, W]
        o = o[..., m.qk_rope_head_dim:m.qk_rope_head_dim + m.kv_lora_rank]  # [T, Hq, C]
        o = torch.bmm(o.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)  # [T, Hq, Vd]
        o = o * torch.sigmoid(linear(x, self.g_proj)).unsqueeze(-1)  # [T, Hq, Vd]
        return linear(o.reshape(T, hq * m.v_head_dim), self.o_proj)  # [T, H]


class Dots3Layer(DeepseekDecoderLayer):
    attention_class = Dots3Attention


class Dots3NoteForCausalLM(LayerTypeRopes, DeepseekForCausalLM):
    """DeepseekForCausalLM's contract with Dots' attention, shapes per layer and the sliding layers' own rope."""

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.register_local_rope(dtype, device, max_context)

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        return Dots3Layer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device), dtype, device)

    def _linear_weights(self) -> list:
        return super()._linear_weights() + [(layer.self_attn, "g_proj") for layer in self.layers]

    def _weight_targets(self) -> dict:
        t = super()._weight_targets()
        for i, layer in enumerate(self.layers):
            a = f"model.layers.{i}.self_attn."
            t.update({a + "g_proj.weight": (layer.self_attn.g_proj, False),
                      a + "k_rope_only_layernorm.weight": (layer.self_attn.k_rope_norm, False)})
        return t

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The checkpoint stream without indexers, multi-token prediction and layers past num_hidden_layers, with each
        layer's rope rows (of q, k_pe and the rope key's norm) in rotate-half order."""
        c = self.config
        for name, tensor in named_tensors:
            layer = _LAYER.match(name)
            if name.startswith("model.mtp.") or ".self_attn.indexer." in name or (
                    layer is not None and int(layer.group(1)) >= c.num_layers):
                continue
            if layer is not None and ".self_attn." in name:
                tensor = _rope_rows_reordered(name, tensor, c.dots3.shapes[int(layer.group(1))])
            yield name, tensor


def _rope_rows_reordered(name: str, tensor: torch.Tensor, m) -> torch.Tensor:
    rope = interleaved_to_half_order(m.qk_rope_head_dim, m.qk_rope_head_dim)
    if name.endswith("self_attn.q_b_proj.weight"):
        return reorder_head_dims(name, tensor, torch.cat([torch.arange(m.qk_nope_head_dim), m.qk_nope_head_dim + rope]))
    if name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
        return reorder_head_dims(name, tensor, torch.cat([torch.arange(m.kv_lora_rank), m.kv_lora_rank + rope]))
    if name.endswith("self_attn.k_rope_only_layernorm.weight"):
        return tensor[rope]
    return tensor
