"""The Llama family in plain torch: Llama, Mistral, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm), Granite (config's
embedding, residual and attention multipliers and logits scaling), SmolLM3 (layers without rope), Ministral and
Seed-OSS (config fields only); the base of llama_like.py's ERNIE 4.5, Hunyuan (q/k norms after rope) and Arcee.

One forward pass runs a ForwardBatch: T new tokens of B requests, concatenated, on top of their
cached prefixes in the paged KV pool (written and read by the attention backend).  Weights are
kept fused and contiguous in one dtype (float32 or bfloat16): qkv_proj = [q; k; v] rows,
gate_up_proj = [gate; up] rows; HF checkpoints are mapped onto them by load_weights.
Notation: T tokens, H hidden, I intermediate, Hq/Hkv query/kv heads, D head_dim, V vocab.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.runner.attention_backend import AttentionBackend
from radixlm.runtime.runner.forward_batch import ForwardBatch

from .fp8_linear import Fp8Weight
from .fp8_model import SKIPPED_SUFFIXES, checkpoint_targets, fused_linears, kv_scale_of
from .layer_ops import Rotary, add_rms_norm, rms_norm, silu_mul
from .layers import pack_linears
from .native_decode import NativeDecode, unsupported_reason
from .packed_linear import linear
from .quant_decode import QuantNativeDecode, quant_unsupported_reason
from .quant_linear import embed
from .rope import query_scale, rope_cos_sin_cache


def _param(*shape, dtype, device) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, attn_backend: AttentionBackend, dtype, device):
        super().__init__()
        c = config
        self.layer_id, self.attn_backend = layer_id, attn_backend
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.eps = c.rms_norm_eps
        self.q_size, self.kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        qkv_rows = self.q_size + 2 * self.kv_size
        self.qkv_proj = _param(qkv_rows, c.hidden_size, dtype=dtype, device=device)  # [(Hq+2Hkv)*D, H]
        self.qkv_bias = _param(qkv_rows, dtype=dtype, device=device) if c.attention_bias else None
        self.o_proj = _param(c.hidden_size, self.q_size, dtype=dtype, device=device)  # [H, Hq*D]
        self.o_bias = _param(c.hidden_size, dtype=dtype, device=device) if c.o_proj_bias else None
        # Qwen3: q_norm weight in rows [:Hq], k_norm weight in rows [Hq:], so one norm serves both.
        self.qk_norm = (_param(c.num_heads + c.num_kv_heads, c.head_dim, dtype=dtype, device=device)
                        if c.qk_norm else None)  # [Hq+Hkv, D]
        self.rope = layer_id not in c.nope_layers
        self.qk_norm_after_rope = c.qk_norm_after_rope
        self.clip_qkv = c.clip_qkv
        self.gemm_rows: Optional[int] = None  # see LlamaForCausalLM.make_batch_invariant
        self.tp = None  # see LlamaForCausalLM.enable_tensor_parallel

    def forward(self, x: torch.Tensor, rotary: Rotary, fb: ForwardBatch) -> torch.Tensor:
        """x: [T, H] -> [T, H].  Writes this layer's K/V into the pool."""
        T, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias, self.gemm_rows)  # [T, (Hq+2Hkv)*D]
        if self.clip_qkv is not None:
            qkv = qkv.clamp(-self.clip_qkv, self.clip_qkv)  # [T, (Hq+2Hkv)*D]
        qkv = qkv.view(T, hq + 2 * hkv, self.head_dim)  # [T, Hq+2Hkv, D]
        qk = qkv[:, :hq + hkv]  # [T, Hq+Hkv, D]
        if self.qk_norm is not None and not self.qk_norm_after_rope:
            qk = self.norm_qk(qk)  # [T, Hq+Hkv, D]
        if self.rope:
            qk = rotary.apply_(qk)  # [T, Hq+Hkv, D]
        if self.qk_norm is not None and self.qk_norm_after_rope:
            qk = self.norm_qk(qk)  # [T, Hq+Hkv, D]
        if rotary.query_scale is not None:
            qk[:, :hq] *= rotary.query_scale  # [T, Hq, D] times [T, 1, 1]
        v = qkv[:, hq + hkv:]  # [T, Hkv, D]
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], v, self.layer_id, fb)  # [T, Hq, D]
        out = linear(o.reshape(T, self.q_size), self.o_proj, self.o_bias, self.gemm_rows)  # [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)  # [T, H]

    def norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """Qwen3's per-head q/k RMSNorm.  qk: [T, Hq+Hkv, D] -> [T, Hq+Hkv, D] (parallel_block.py: LayerNorms)."""
        return rms_norm(qk, self.qk_norm, self.eps)


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, dtype, device):
        super().__init__()
        c = config
        self.gate_up_proj = _param(2 * c.intermediate_size, c.hidden_size, dtype=dtype, device=device)  # [2I, H]
        self.down_proj = _param(c.hidden_size, c.intermediate_size, dtype=dtype, device=device)  # [H, I]
        self.gate_up_bias = _param(2 * c.intermediate_size, dtype=dtype, device=device) if c.mlp_bias else None  # [2I]
        self.down_bias = _param(c.hidden_size, dtype=dtype, device=device) if c.mlp_bias else None  # [H]
        self.gemm_rows: Optional[int] = None  # see LlamaForCausalLM.make_batch_invariant
        self.tp = None  # see LlamaForCausalLM.enable_tensor_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """SwiGLU (mlp_bias: biases on all three projections).  x: [T, H] -> [T, H]."""
        gate_up = linear(x, self.gate_up_proj, self.gate_up_bias, self.gemm_rows)  # [T, 2I]
        out = linear(silu_mul(gate_up), self.down_proj, self.down_bias, self.gemm_rows)  # [T, I] -> [T, H]
        return out if self.tp is None else self.tp.all_reduce(out)  # [T, H]


class LlamaDecoderLayer(nn.Module):
    attention_class = LlamaAttention   # minimax_m2.py: whole-width q/k norms

    def __init__(self, config: ModelConfig, layer_id: int, attn_backend, dtype, device, mlp: Optional[nn.Module] = None):
        """mlp: any module mapping [T, H] -> [T, H] with a `tp` attribute (default: the dense SwiGLU MLP)."""
        super().__init__()
        self.eps, self.residual_multiplier = config.rms_norm_eps, config.residual_multiplier
        self.input_layernorm = _param(config.hidden_size, dtype=dtype, device=device)  # [H]
        self.post_attention_layernorm = _param(config.hidden_size, dtype=dtype, device=device)  # [H]
        self.self_attn = self.attention_class(config, layer_id, attn_backend, dtype, device)
        self.mlp = mlp if mlp is not None else LlamaMLP(config, dtype, device)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor], rotary: Rotary, fb: ForwardBatch):
        """Pre-norm residual block.  x: [T, H], the previous block's output, not yet added to the
        residual stream [T, H] (None before layer 0, where x is the stream).  Returns (output,
        residual); the residual tensor is updated in place."""
        if residual is None:
            residual, h = x, rms_norm(x, self.input_layernorm, self.eps)
        else:
            h = add_rms_norm(x, residual, self.input_layernorm, self.eps)
        x = self._to_residual(self.self_attn(h, rotary, fb))  # [T, H]
        return self._to_residual(self.mlp(add_rms_norm(x, residual, self.post_attention_layernorm, self.eps))), residual

    def _to_residual(self, x: torch.Tensor) -> torch.Tensor:
        """A sublayer's output [T, H] as it joins the residual stream (Granite: scaled)."""
        return x if self.residual_multiplier == 1.0 else x * self.residual_multiplier


class LlamaForCausalLM(nn.Module):
    """forward(fb) -> final-normed hidden states [T, H]; compute_logits(hidden [N, H]) -> [N, V] float32.

    Positions must be < max_context (default config.context_length).  Weights are uninitialised
    until load_weights has consumed a complete checkpoint.  forward mutates the KV pool through
    the attention backend and runs under torch.no_grad (outputs are ordinary tensors).
    """

    loads_fp8_checkpoints = True  # load_weights reads fp8_model's checkpoint layouts (names q/k/v_proj, gate/up_proj)
    MLP_LINEARS = ("gate_up_proj", "down_proj")   # the MLP's weights that pack_weights packs

    def __init__(self, config: ModelConfig, attn_backend: AttentionBackend, dtype=torch.float32,
                 device="cpu", max_context: Optional[int] = None):
        super().__init__()
        c = config
        self.config, self.attn_backend, self.dtype = c, attn_backend, dtype
        self.embed_tokens = _param(c.vocab_size, c.hidden_size, dtype=dtype, device=device)  # [V, H]
        self.layers = nn.ModuleList(self.make_layer(i, attn_backend, dtype, device) for i in range(c.num_layers))
        self.norm = _param(c.hidden_size, dtype=dtype, device=device)  # [H]
        self.lm_head = (self.embed_tokens if c.tie_word_embeddings
                        else _param(c.vocab_size, c.hidden_size, dtype=dtype, device=device))  # [V, H]
        cache = rope_cos_sin_cache(c, max_context or c.context_length)  # [C, D] float32
        self.register_buffer("cos_sin", cache.to(device=device, dtype=dtype), persistent=False)  # [C, D]
        self.gemm_rows: Optional[int] = None  # see make_batch_invariant
        self.tp = None  # see enable_tensor_parallel
        self.native_decode: Optional[NativeDecode] = None  # see enable_native_decode
        self.quantization: Optional[dict] = None  # GGUF weights kept quantized: gguf_weights.load_gguf_weights' summary
        if c.layer_windows:   # enforced by every attention kernel
            attn_backend.set_layer_variants(c.layer_windows)
        self.window = min((w for w in c.layer_windows if w), default=None)

    def make_layer(self, layer_id: int, attn_backend, dtype, device) -> nn.Module:
        """Decoder layer `layer_id` (subclasses swap its MLP: runtime/models/moe_model.py)."""
        return LlamaDecoderLayer(self.config, layer_id, attn_backend, dtype, device)

    @torch.no_grad()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(fb)
        if self.tp is None:
            x = embed(fb.input_ids, self.embed_tokens, self.dtype)  # [T, H]
        else:
            x = self.tp.embed(fb.input_ids, self.embed_tokens)  # [T, H]
        if self.config.embedding_multiplier != 1.0:
            x = x * self.config.embedding_multiplier  # [T, H]
        residual = None
        rotary = Rotary(fb.positions, self.cos_sin, query_scale(self.config, fb.positions, self.dtype))
        native = self.native_decode.run(x, fb) if self.native_decode is not None and self._native_fits(fb) else None
        if native is not None:
            x, residual = native
            return add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)  # [T, H]
        for layer in self.layers:
            x, residual = layer(x, residual, rotary, fb)  # [T, H] each
        return add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)  # [T, H]

    def _native_fits(self, fb: ForwardBatch) -> bool:
        """Whether the one-call native decode, which attends without sliding windows and leaves queries unscaled, may
        run this step: no request's context is longer than a sliding window, nor reaches a position whose query scale
        is not 1 (Ministral 3: original_max_position_embeddings on).  The op-by-op layers take both."""
        scaled_from = self.config.query_scale[1] if self.config.query_scale is not None else None
        limits = [limit for limit in (self.window, scaled_from) if limit is not None]
        if not limits:   # the common case: no scan of the batch on the host
            return True
        return max((p + e for p, e in zip(fb.prefix_lens_list, fb.extend_lens_list)), default=0) <= min(limits)

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32 (with tensor parallelism: on every rank)."""
        logits = self.native_decode.logits(hidden) if self.native_decode is not None else None  # None: too many rows
        if logits is None:
            logits = linear(hidden, self.lm_head, None, self.gemm_rows)  # [N, V] ([N, V/tp] of a shard)
            logits = (logits if self.tp is None else self.tp.gather_logits(logits)).float()  # [N, V]
        return self._scale_logits(logits)  # [N, V]

    def _scale_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Granite: float32 logits [N, V] (holding model-dtype values) divided by logits_scaling in the model dtype."""
        scaling = self.config.logits_scaling
        return logits if scaling == 1.0 else (logits.to(self.dtype) / scaling).float()  # [N, V]

    def enable_tensor_parallel(self, tp) -> None:
        """This model holds one rank's shards (runtime/distributed/sharding.py): o_proj and down_proj outputs are
        all-reduced, the embedding is looked up in the vocabulary shard and all-reduced, and the logits of the
        shards are all-gathered.  tp: a runtime.distributed.group.TensorParallel."""
        if self.config.mlp_bias:
            raise ValueError(f"{self.config.architecture}: tensor parallelism with mlp_bias=True is not supported")
        self.tp = tp
        self.native_decode = None
        for layer in self.layers:
            layer.self_attn.tp = layer.mlp.tp = tp

    def enable_native_decode(self) -> Optional[str]:
        """Decode steps of up to native_decode.max_rows_for(...) rows run every layer in one native call, from dense
        references to the current weights (call before pack_weights, which then leaves them alive).
        Returns why it cannot (None when enabled)."""
        if self.quantization is not None:   # GGUF blocks: their own linear layers inside the same call
            reason = quant_unsupported_reason(self)
            self.native_decode = QuantNativeDecode(self) if reason is None else None
            return reason
        reason = unsupported_reason(self) or ("fp8 weights" if self.quantized else None)
        self.native_decode = NativeDecode(self) if reason is None else None
        return reason

    @property
    def quantized(self) -> bool:
        """Whether any decoder linear weight is an Fp8Weight (fp8_model.py)."""
        return any(isinstance(getattr(m, name), Fp8Weight) for m, name, _ in fused_linears(self))

    def make_batch_invariant(self, gemm_rows: int) -> None:
        """Every linear layer and the lm head run as GEMMs of exactly gemm_rows rows (packed_linear.linear),
        so a token's hidden states and logits do not depend on how many tokens share its step. The other
        ops are per row already (embedding, norms, rope, silu*mul); attention is made invariant by the
        backend (radixlm_kernels/batch_invariant.py)."""
        self.gemm_rows = gemm_rows
        self.native_decode = None  # its row kernel's sums do not follow the fixed GEMM shapes
        for layer in self.layers:
            layer.self_attn.gemm_rows = layer.mlp.gemm_rows = gemm_rows

    def pack_weights(self, rows_pack: bool = False, amx_pack: bool = False) -> bool:
        """Swap every linear weight for a copy packed for the CPU GEMM (see packed_linear.py) and drop
        the dense copies; load_weights cannot be called afterwards.  Returns whether it packed
        (False where packing is unavailable: the model then keeps its dense weights).  rows_pack: float32
        weights also get MKL's packing for decode batches of 40-64 rows, where the CPU has it; amx_pack:
        bfloat16 weights also get the AMX linear's packing for decode batches of up to 32 rows.  FP8 weights
        (fp8_model.py) stay as they are."""
        if self.quantization is not None:
            return False   # the weights stay in their GGUF blocks (quant_linear.QuantWeight)
        if not pack_linears(self._linear_weights(), self.dtype, self.embed_tokens.device, rows_pack, amx_pack):
            return False
        if self.native_decode is not None:
            self.native_decode.bind_amx_packs()  # its row limit depends on the copies made here
        return True

    def _linear_weights(self) -> list:
        """(module, attribute name) of every weight pack_weights packs."""
        swaps = [(self, "lm_head")]
        for layer in self.layers:
            swaps += [(layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj")]
            swaps += [(layer.mlp, name) for name in self.MLP_LINEARS]
        return swaps

    def _outer_targets(self) -> dict:
        """The targets outside the layers: embeddings, final norm, and the lm head unless tied."""
        t = {"model.embed_tokens.weight": (self.embed_tokens, False), "model.norm.weight": (self.norm, False)}
        if not self.config.tie_word_embeddings:
            t["lm_head.weight"] = (self.lm_head, False)
        return t

    def _weight_targets(self) -> dict:
        """HF name -> (destination tensor view, broadcast: False, True (trailing dims) or "scalar")."""
        c, t = self.config, self._outer_targets()
        for module, name, parts in fused_linears(self):
            weight = getattr(module, name)
            if isinstance(weight, Fp8Weight):
                t.update(checkpoint_targets(weight, parts))
            else:
                t.update({prefix + ".weight": (weight[lo:hi], False) for prefix, lo, hi in parts})
        for i, layer in enumerate(self.layers):
            p, attn = f"model.layers.{i}.", layer.self_attn
            t.update(self._norm_targets(p, layer))
            if attn.qkv_bias is not None:
                q, kv = attn.q_size, attn.kv_size
                t[p + "self_attn.q_proj.bias"] = (attn.qkv_bias[:q], False)
                t[p + "self_attn.k_proj.bias"] = (attn.qkv_bias[q:q + kv], False)
                t[p + "self_attn.v_proj.bias"] = (attn.qkv_bias[q + kv:], False)
            if attn.o_bias is not None:
                t[p + "self_attn.o_proj.bias"] = (attn.o_bias, False)
            if attn.qk_norm is not None:
                t[p + "self_attn.q_norm.weight"] = (attn.qk_norm[:c.num_heads], True)
                t[p + "self_attn.k_norm.weight"] = (attn.qk_norm[c.num_heads:], True)
            if not hasattr(layer.mlp, "gate_up_proj"):     # a sparse MLP (moe_model.py): its own names
                t.update(self._mlp_targets(i, layer.mlp))
            elif getattr(layer.mlp, "gate_up_bias", None) is not None:   # mlp_bias (GemmaMLP has none)
                t.update(self._mlp_bias_targets(p + "mlp.", layer.mlp))
        return t

    def _norm_targets(self, prefix: str, layer) -> dict:
        """HF name -> (destination, broadcast allowed) of one layer's residual-stream norms (olmo2.py: its own)."""
        return {prefix + "input_layernorm.weight": (layer.input_layernorm, False),
                prefix + "post_attention_layernorm.weight": (layer.post_attention_layernorm, False)}

    def _mlp_targets(self, layer_id: int, mlp) -> dict:
        """HF name -> (destination, broadcast allowed) of one layer's MLP."""
        p, inter = f"model.layers.{layer_id}.mlp.", mlp.down_proj.shape[1]
        return {p + "gate_proj.weight": (mlp.gate_up_proj[:inter], False),
                p + "up_proj.weight": (mlp.gate_up_proj[inter:], False),
                p + "down_proj.weight": (mlp.down_proj, False)}

    @staticmethod
    def _mlp_bias_targets(prefix: str, mlp) -> dict:
        """HF name -> (destination, broadcast allowed) of the gated MLP's biases (mlp_bias)."""
        inter = mlp.down_proj.shape[1]
        return {prefix + "gate_proj.bias": (mlp.gate_up_bias[:inter], False),
                prefix + "up_proj.bias": (mlp.gate_up_bias[inter:], False),
                prefix + "down_proj.bias": (mlp.down_bias, False)}

    def checkpoint_tensors(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]):
        """A checkpoint's (name, tensor) stream in the names and layouts that load_weights and the sharder
        (runtime/distributed/sharding.py) read: HF's own here; gpt_oss.py converts its experts."""
        return named_tensors

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Copy a complete HF checkpoint (name, tensor) stream into our fused parameters.

        Ignores rotary inv_freq buffers, FP8 checkpoints' static activation and KV scales (fp8_model.py) and,
        when embeddings are tied, lm_head.weight.  Raises ValueError on an unknown name, a shape mismatch, or
        when any weight is missing at the end.  FP8 checkpoints: call fp8_model.prepare_checkpoint first.
        """
        targets, loaded = self._weight_targets(), set()
        for name, tensor in named_tensors:
            if (name.endswith("rotary_emb.inv_freq") or name.endswith(SKIPPED_SUFFIXES)
                    or (name == "lm_head.weight" and self.config.tie_word_embeddings)):
                continue
            kv_scale = kv_scale_of(name)
            if kv_scale is not None:  # an FP8 checkpoint's KV cache scale: the pool's, for an fp8_e4m3 pool
                layer, kind = kv_scale
                getattr(self.attn_backend.kv_pool, f"{kind}_scales")[layer] = float(tensor.float().reshape(-1)[0])
                continue
            if name not in targets:
                raise ValueError(f"unexpected weight {name!r} for {self.config.architecture}")
            dst, broadcast = targets[name]
            if broadcast == "scalar" and tensor.numel() == 1:
                tensor = tensor.reshape(()).expand(dst.shape)  # a per-tensor scale, for each of its rows
            want = dst.shape[-tensor.dim():] if broadcast is True else dst.shape
            if tuple(tensor.shape) != tuple(want):
                raise ValueError(f"weight {name!r} has shape {tuple(tensor.shape)}, expected {tuple(want)}")
            dst.copy_(tensor)
            loaded.add(name)
        missing = sorted(set(targets) - loaded)
        if missing:
            raise ValueError(f"checkpoint is missing {len(missing)} weights, e.g. {missing[:3]}")
