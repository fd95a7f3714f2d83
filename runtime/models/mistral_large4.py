"""Mistral Large 4's language model (HF MistralLarge4TextModel under MistralLarge4ForConditionalGeneration; its fields
and the context cap at index_topk: mistral_large4_config.py): DeepSeek's layers (deepseek.py) whose multi-head latent
attention (mla.py's absorbed form) has no low-rank query, and
  - NoPE layers (config.nope_layers): every query and key dim is a "nope" one, so kv_b_proj has N + R key rows per
    head and kv_a_proj_with_mqa no k_pe rows; the pool's k_pe slot holds zeros and so does the query's, adding 0;
  - layers that reuse an earlier layer's latent KV (config.kv_source_layers) have no kv_a_proj_with_mqa nor
    kv_a_layernorm and attend over that layer's pool layer, storing nothing (the pool has config.kv_layers layers);
  - LeRoPE: the rotary table is rebuilt after loading with YaRN's inverse frequencies times exp(model.rotary_emb.alpha);
  - each head's query (after the rope) times scale_h * log(position + 1) + bias_h (self_attn.softmax_scaling);
  - logits soft-capped at config.final_softcap.
The indexers' and the multi-token-prediction head's weights are read and dropped (dsa.py's reason; HF ignores the
head).  Notation as in mla.py.
"""

import re
from typing import Iterable, Tuple

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

from .deepseek import DeepseekDecoderLayer, DeepseekForCausalLM
from .interleaved_rope import interleaved_to_half_order, reorder_head_dims
from .layer_ops import Rotary
from .layers import param, soft_cap
from .mla import MLAAttention
from .moe import SparseMoeBlock
from .multimodal_text import split_stacked_experts
from .packed_linear import linear
from .rope import rope_inv_freq

_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_DROPPED = (".self_attn.indexer.", "mtp_dspark.")


class MistralLarge4Attention(MLAAttention):
    """MLA without a low-rank query, with NoPE layers, KV reuse and per-head query scaling (the module docstring)."""

    def __init__(self, config, layer_id: int, attn_backend, dtype, device):
        torch.nn.Module.__init__(self)
        c, m = config, config.mla
        self.attn_backend, self.num_heads, self.m, self.latent_eps = attn_backend, c.num_heads, m, c.rms_norm_eps
        self.rope = layer_id not in c.nope_layers
        sources = c.kv_source_layers
        self.reuses = sources[layer_id] != layer_id
        self.layer_id = self.pool_layer(sources, layer_id)
        self.nope_dim = m.qk_nope_head_dim + (0 if self.rope else m.qk_rope_head_dim)  # N (+ R in a NoPE layer)
        self.kv_a_rows = 0 if self.reuses else m.kv_lora_rank + (m.qk_rope_head_dim if self.rope else 0)
        self.q_rows = c.num_heads * m.qk_head_dim
        self.qkv_a_proj = param(self.q_rows + self.kv_a_rows, c.hidden_size, dtype=dtype, device=device)
        self.q_a_layernorm = self.q_b_proj = None
        self.kv_a_layernorm = None if self.reuses else param(m.kv_lora_rank, dtype=dtype, device=device)  # [C]
        self.kv_b_proj = param(c.num_heads, self.nope_dim + m.v_head_dim, m.kv_lora_rank,
                               dtype=dtype, device=device)  # [Hq, N'+Vd, C]
        self.o_proj = param(c.hidden_size, c.num_heads * m.v_head_dim, dtype=dtype, device=device)  # [H, Hq*Vd]
        self.softmax_scale = param(c.num_heads, dtype=dtype, device=device)  # [Hq]
        self.softmax_bias = param(c.num_heads, dtype=dtype, device=device)  # [Hq]

    @staticmethod
    def pool_layer(sources: tuple, layer_id: int) -> int:
        """The pool layer holding the KV that layer `layer_id` attends over: its source's rank among the owners."""
        return sum(s == i for i, s in enumerate(sources[:sources[layer_id]]))

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  A layer owning its KV writes [k_pe | latent] (k_pe zeros in a NoPE layer)."""
        T, hq, m = x.shape[0], self.num_heads, self.m
        qkv_a = linear(x, self.qkv_a_proj)  # [T, Hq*(N+R) + C (+ R)]
        q = qkv_a[:, :self.q_rows].view(T, hq, m.qk_head_dim)  # [T, Hq, N+R]
        q_nope, q_pe = q.split([self.nope_dim, m.qk_head_dim - self.nope_dim], dim=-1)  # [T, Hq, N'], [T, Hq, R or 0]
        w_uk, w_uv = self.kv_b_proj.split([self.nope_dim, m.v_head_dim], dim=1)  # [Hq, N', C], [Hq, Vd, C]
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [T, Hq, C]
        if not self.rope:
            q_pe = q_latent.new_zeros(T, hq, m.qk_rope_head_dim)  # [T, Hq, R]
        qk = torch.cat((q_pe, q_latent), dim=-1)  # [T, Hq, R + C]
        if not self.reuses:
            latent, k_pe = qkv_a[:, self.q_rows:].split([m.kv_lora_rank, self.kv_a_rows - m.kv_lora_rank], dim=-1)
            if not self.rope:
                k_pe = latent.new_zeros(T, m.qk_rope_head_dim)  # [T, R]
            kv = torch.cat((k_pe, self.latent_norm(latent, self.kv_a_layernorm)), dim=-1)  # [T, R + C]
            qk = torch.cat((qk, kv.unsqueeze(1)), dim=1)  # [T, Hq+1, R + C]
        if self.rope:
            qk = rotary.apply_(qk)  # the first R dims of each head rotate
        qk[:, :hq] *= self.query_factor(rotary.positions, qk.dtype)  # [T, Hq, R + C] times [T, Hq, 1]
        if self.reuses:
            o = self.attn_backend.attend(qk, self.layer_id, fb)  # [T, Hq, R + C]
        else:
            k = qk[:, hq:]  # [T, 1, R + C]
            o = self.attn_backend.forward(qk[:, :hq], k, k, self.layer_id, fb)  # [T, Hq, R + C]
        o = torch.bmm(o[..., m.qk_rope_head_dim:].transpose(0, 1), w_uv.transpose(1, 2))  # [Hq, T, Vd]
        return linear(o.transpose(0, 1).reshape(T, hq * m.v_head_dim), self.o_proj)  # [T, H]

    def query_factor(self, positions: torch.Tensor, dtype) -> torch.Tensor:
        """scale_h * log(position + 1) + bias_h [T, Hq, 1] (HF: the log in float32, then the query's dtype)."""
        log_pos = torch.log((positions + 1).float()).to(dtype)  # [T]
        return (self.softmax_scale.to(dtype)[None, :] * log_pos[:, None]
                + self.softmax_bias.to(dtype)[None, :]).unsqueeze(-1)  # [T, Hq, 1]

    def checkpoint_targets(self, a: str) -> dict:
        """HF name -> (destination, broadcast allowed) under `a` ("model.layers.3.self_attn.")."""
        t = {a + "q_proj.weight": (self.qkv_a_proj[:self.q_rows], False),
             a + "kv_b_proj.weight": (self.kv_b_proj.flatten(0, 1), False),  # [Hq*(N'+Vd), C] view
             a + "o_proj.weight": (self.o_proj, False),
             a + "softmax_scaling.scale": (self.softmax_scale, False),
             a + "softmax_scaling.bias": (self.softmax_bias, False)}
        if not self.reuses:
            t[a + "kv_a_proj_with_mqa.weight"] = (self.qkv_a_proj[self.q_rows:], False)
            t[a + "kv_a_layernorm.weight"] = (self.kv_a_layernorm, False)
        return t


class MistralLarge4DecoderLayer(DeepseekDecoderLayer):
    attention_class = MistralLarge4Attention


class MistralLarge4ForCausalLM(DeepseekForCausalLM):
    """DeepseekForCausalLM's contract with Mistral Large 4's layers, LeRoPE table and soft-capped logits."""

    def __init__(self, config, attn_backend, dtype=torch.float32, device="cpu", max_context=None):
        super().__init__(config, attn_backend, dtype, device, max_context)
        self.rope_alpha = param(config.rope_dim // 2, dtype=torch.float32, device=device)  # [R/2]

    def make_layer(self, layer_id: int, attn_backend, dtype, device):
        return MistralLarge4DecoderLayer(self.config, layer_id, attn_backend, self._make_mlp(layer_id, dtype, device),
                                         dtype, device)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return soft_cap(super().compute_logits(hidden), self.config.final_softcap)  # [N, V]

    def _weight_targets(self) -> dict:
        t = self._outer_targets()
        t["model.rotary_emb.alpha"] = (self.rope_alpha, False)
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            t.update(self._norm_targets(p, layer))
            t.update(layer.self_attn.checkpoint_targets(p + "self_attn."))
            if isinstance(layer.mlp, SparseMoeBlock):
                t.update(layer.mlp.checkpoint_targets(p + "mlp."))
            else:
                t.update(self._mlp_targets(i, layer.mlp))
        return t

    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(named_tensors)
        self._lerope_table()

    @torch.no_grad()
    def _lerope_table(self) -> None:
        """cos_sin rebuilt as HF's rotary: float32 positions times YaRN's inv_freq times exp(alpha)."""
        scaling = self.config.rope_scaling or {}
        t = torch.arange(self.cos_sin.shape[0], dtype=torch.int64).float()  # [L]
        inv_freq = rope_inv_freq(self.config) * self.rope_alpha.detach().float().cpu().exp()  # [R/2]
        freqs = t[:, None] * inv_freq  # [L, R/2]
        table = torch.cat((freqs.cos(), freqs.sin()), dim=-1) * scaling.get("attention_factor", 1.0)  # [L, R]
        self.cos_sin.copy_(table.to(self.cos_sin.dtype))

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """The stream without indexers, the draft head and layers past num_hidden_layers, the rope rows of the rope
        layers' q_proj and kv_a_proj_with_mqa in rotate-half order, stacked experts split."""
        c, m = self.config, self.config.mla
        rope = interleaved_to_half_order(m.qk_rope_head_dim, m.qk_rope_head_dim)
        q_order = torch.cat([torch.arange(m.qk_nope_head_dim), m.qk_nope_head_dim + rope])  # [N+R]
        kv_order = torch.cat([torch.arange(m.kv_lora_rank), m.kv_lora_rank + rope])  # [C+R]
        for name, tensor in named_tensors:
            if any(d in name for d in _DROPPED):
                continue
            layer = _LAYER.match(name)
            i = int(layer.group(1)) if layer is not None else None
            if i is not None and i >= c.num_layers:
                continue
            if i is not None and i not in c.nope_layers:
                if name.endswith("self_attn.q_proj.weight"):
                    tensor = reorder_head_dims(name, tensor, q_order)  # [Hq*(N+R), H]
                elif name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
                    tensor = reorder_head_dims(name, tensor, kv_order)  # [C+R, H]
            yield from split_stacked_experts(name, tensor, c)
