"""Gemma 2 in plain torch (HF modeling_gemma2.py), the base of Gemma 3 (gemma3.py).

Differences from the Llama family: embeddings scaled by sqrt(H) (rounded to the model dtype, as HF does);
(1 + weight) RMSNorm in float32 (layers.gemma_rms_norm); four norms per layer (input, post-attention,
pre- and post-feed-forward), each sublayer's output normed before it joins the residual stream; scores scaled
by query_pre_attn_scalar ** -0.5; sliding-window layers (config.layer_windows) and score soft-capping, both done
by the attention backend (set_layer_variants); a gelu-tanh gated MLP; the lm head tied to the embeddings, its
logits soft-capped (final_softcap).  Gemma 3 adds q/k norms and a local rope base (config.qk_norm,
config.local_rope_theta), handled here too.  Weights are fused as in llama.py: qkv_proj = [q; k; v] rows,
gate_up_proj = [gate; up] rows.  Notation: T tokens, H hidden, I intermediate, Hq/Hkv heads, D head_dim, V vocab.
"""

import dataclasses
import math
from typing import Iterable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .fp8_linear import Fp8Weight
from .fp8_model import fused_linears
from .layer_ops import Rotary
from .layers import gelu_tanh_mul, gemma_rms_norm, pack_linears, param, soft_cap
from .packed_linear import linear
from .rope import rope_cos_sin_cache


class GemmaAttention(nn.Module):
    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.layer_id, self.attn_backend, self.eps = layer_id, attn_backend, c.rms_norm_eps
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.local = bool(c.layer_windows and c.layer_windows[layer_id])  # a sliding-window layer
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.qkv_proj = param(q + 2 * kv, c.hidden_size, dtype=dtype, device=device)  # [(Hq+2Hkv)*D, H]
        self.o_proj = param(c.hidden_size, q, dtype=dtype, device=device)  # [H, Hq*D]
        self.q_norm = param(c.head_dim, dtype=dtype, device=device) if c.qk_norm else None  # [D]
        self.k_norm = param(c.head_dim, dtype=dtype, device=device) if c.qk_norm else None  # [D]
        self.gemm_rows: Optional[int] = None

    def forward(self, x: torch.Tensor, rotary: Rotary, local_rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, None, self.gemm_rows).view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]  # [T, Hq, D], [T, Hkv, D] x2
        if self.q_norm is not None:
            q = gemma_rms_norm(q, self.q_norm, self.eps)  # [T, Hq, D]
            k = gemma_rms_norm(k, self.k_norm, self.eps)  # [T, Hkv, D]
        rot = local_rotary if self.local else rotary
        q, k = rot.apply_(q.contiguous()), rot.apply_(k.contiguous())  # [T, Hq, D], [T, Hkv, D]
        o = self.attn_backend.forward(q, k, v, self.layer_id, fb)  # [T, Hq, D]
        return linear(o.reshape(T, hq * self.head_dim), self.o_proj, None, self.gemm_rows)  # [T, H]


class GemmaMLP(nn.Module):
    def __init__(self, c: ModelConfig, dtype, device):
        super().__init__()
        self.gate_up_proj = param(2 * c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [2I, H]
        self.down_proj = param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.gemm_rows: Optional[int] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate_up = linear(x, self.gate_up_proj, None, self.gemm_rows)  # [T, 2I]
        return linear(gelu_tanh_mul(gate_up), self.down_proj, None, self.gemm_rows)  # [T, I] -> [T, H]


NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


class GemmaDecoderLayer(nn.Module):
    NORMS = NORMS

    def __init__(self, c: ModelConfig, layer_id: int, attn_backend, dtype, device):
        super().__init__()
        self.eps = c.rms_norm_eps
        for name in NORMS:
            setattr(self, name, param(c.hidden_size, dtype=dtype, device=device))  # [H]
        self.self_attn = GemmaAttention(c, layer_id, attn_backend, dtype, device)
        self.mlp = GemmaMLP(c, dtype, device)

    def forward(self, x: torch.Tensor, rotary: Rotary, local_rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] residual stream -> [T, H]."""
        h = self.self_attn(gemma_rms_norm(x, self.input_layernorm, self.eps), rotary, local_rotary, fb)  # [T, H]
        x = x + gemma_rms_norm(h, self.post_attention_layernorm, self.eps)  # [T, H]
        h = self.mlp(gemma_rms_norm(x, self.pre_feedforward_layernorm, self.eps))  # [T, H]
        return x + gemma_rms_norm(h, self.post_feedforward_layernorm, self.eps)  # [T, H]


class Gemma2ForCausalLM(nn.Module):
    """forward(fb) -> final-normed hidden states [T, H]; compute_logits(hidden [N, H]) -> [N, V] float32.

    The same contract as llama.LlamaForCausalLM (positions < max_context, load_weights before use, forward
    mutates the KV pool).  No native one-call decode and no tensor parallelism: every step runs op by op.
    """

    loads_gguf_weights = False  # gguf_weights.py fills the Llama layer only

    def __init__(self, config: ModelConfig, attn_backend, dtype=torch.float32, device="cpu",
                 max_context: Optional[int] = None):
        super().__init__()
        c = config
        self.config, self.attn_backend, self.dtype = c, attn_backend, dtype
        attn_backend.set_layer_variants(c.layer_windows or [None] * c.num_layers, c.attn_softcap)
        self.embed_tokens = param(c.vocab_size, c.hidden_size, dtype=dtype, device=device)  # [V, H]
        self.layers = nn.ModuleList(self.make_layer(i, attn_backend, dtype, device) for i in range(c.num_layers))
        self.norm = param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.lm_head = (self.embed_tokens if c.tie_word_embeddings
                        else param(c.vocab_size, c.hidden_size, dtype=dtype, device=device))  # [V, H]
        length = max_context or c.context_length
        self.register_buffer("cos_sin", rope_cos_sin_cache(c, length).to(device=device, dtype=dtype),
                             persistent=False)  # [C, D]
        local = c if c.local_rope_theta is None else dataclasses.replace(c, rope_theta=c.local_rope_theta,
                                                                          rope_scaling=None)
        self.register_buffer("local_cos_sin", rope_cos_sin_cache(local, length).to(device=device, dtype=dtype),
                             persistent=False)  # [C, D] the sliding layers' rope (Gemma 3's local base)
        self.embed_scale = torch.tensor(math.sqrt(c.hidden_size), dtype=dtype).item()  # sqrt(H) in the model dtype
        self.gemm_rows: Optional[int] = None
        self.tp = None
        self.native_decode = None

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        """Decoder layer `layer_id` (gemma.py: Gemma 1's two-norm layer)."""
        return GemmaDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    @property
    def quantized(self) -> bool:
        """Whether any decoder linear weight is an Fp8Weight (--quantization fp8, fp8_model.py)."""
        return any(isinstance(getattr(m, name), Fp8Weight) for m, name, _ in fused_linears(self))

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(fb)
        x = F.embedding(fb.input_ids, self.embed_tokens) * self.embed_scale  # [T, H]
        rotary = Rotary(fb.positions, self.cos_sin)
        local_rotary = Rotary(fb.positions, self.local_cos_sin)
        for layer in self.layers:
            x = layer(x, rotary, local_rotary, fb)  # [T, H]
        return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)  # [T, H]

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32, soft-capped by final_softcap."""
        logits = linear(hidden, self.lm_head, None, self.gemm_rows).float()  # [N, V]
        return soft_cap(logits, self.config.final_softcap)  # [N, V]

    def enable_tensor_parallel(self, tp) -> None:
        raise ValueError(f"{self.config.architecture}: tensor parallelism is not supported yet")

    def enable_native_decode(self) -> Optional[str]:
        return f"{self.config.architecture} layers are not in the native one-call decode"

    def make_batch_invariant(self, gemm_rows: int) -> None:
        """Every linear layer and the lm head as GEMMs of gemm_rows rows (see LlamaForCausalLM)."""
        self.gemm_rows = gemm_rows
        for layer in self.layers:
            layer.self_attn.gemm_rows = layer.mlp.gemm_rows = gemm_rows

    def pack_weights(self, rows_pack: bool = False, amx_pack: bool = False) -> bool:
        """Linear weights and the lm head packed for the CPU GEMM (see LlamaForCausalLM.pack_weights)."""
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj"),
                      (layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")]
        return pack_linears(swaps, self.dtype, self.embed_tokens.device, rows_pack, amx_pack)

    def _weight_targets(self) -> dict:
        """HF name -> destination tensor view."""
        c, t = self.config, {"model.embed_tokens.weight": self.embed_tokens, "model.norm.weight": self.norm}
        if not c.tie_word_embeddings:
            t["lm_head.weight"] = self.lm_head
        q, kv, inter = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.intermediate_size
        for i, layer in enumerate(self.layers):
            p, attn, mlp = f"model.layers.{i}.", layer.self_attn, layer.mlp
            for name in layer.NORMS:
                t[p + name + ".weight"] = getattr(layer, name)
            t[p + "self_attn.q_proj.weight"] = attn.qkv_proj[:q]
            t[p + "self_attn.k_proj.weight"] = attn.qkv_proj[q:q + kv]
            t[p + "self_attn.v_proj.weight"] = attn.qkv_proj[q + kv:]
            t[p + "self_attn.o_proj.weight"] = attn.o_proj
            if attn.q_norm is not None:
                t[p + "self_attn.q_norm.weight"] = attn.q_norm
                t[p + "self_attn.k_norm.weight"] = attn.k_norm
            t[p + "mlp.gate_proj.weight"] = mlp.gate_up_proj[:inter]
            t[p + "mlp.up_proj.weight"] = mlp.gate_up_proj[inter:]
            t[p + "mlp.down_proj.weight"] = mlp.down_proj
        return t

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Copy a complete HF checkpoint into our fused parameters (a tied lm_head.weight is ignored).  ValueError
        on an unknown name, a shape mismatch or a missing weight."""
        targets, loaded = self._weight_targets(), set()
        for name, tensor in named_tensors:
            if (name == "lm_head.weight" and self.config.tie_word_embeddings) or name.endswith("rotary_emb.inv_freq"):
                continue
            if name not in targets:
                raise ValueError(f"unexpected weight {name!r} for {self.config.architecture}")
            dst = targets[name]
            if tuple(tensor.shape) != tuple(dst.shape):
                raise ValueError(f"weight {name!r} has shape {tuple(tensor.shape)}, expected {tuple(dst.shape)}")
            dst.copy_(tensor)
            loaded.add(name)
        missing = sorted(set(targets) - loaded)
        if missing:
            raise ValueError(f"checkpoint is missing {len(missing)} weights, e.g. {missing[:3]}")
