"""Decode steps of a few rows through every decoder layer in one native call
(radixlm_kernels/csrc/cpu_decode_layers.c), and their lm head by the same row kernel (by the AMX linear, op by op,
where bind_amx_packs found its copies).

A one-row decode step on a CPU streams the model's weights once; oneDNN's GEMM reads them at well
below the memory's speed at that size, and the fifteen torch ops a layer around the GEMMs cost as
much again. The native call runs the same ops in the same order with the same roundings; only the
linear layers' float32 sums are taken in another order. It needs the dense weights, so a model
whose weights were packed for oneDNN keeps a second, dense copy (see model_setup.build_model, which
enables this only where that copy is small beside the memory).

`run` returns None where a step does not qualify (more rows, a mixed step, a layout the native
attention call does not take); the model then runs op by op.
"""

import ctypes
from typing import Optional

import torch

from radixlm.kernels import cpu_native
from radixlm.kernels.cpu_shared_prefix import packed_loops_take

# The most rows a step takes natively, by where the op-by-op path's GEMMs become faster (bench/README.md):
MAX_ROWS_AMX_BF16 = 8   # Intel AMX, bfloat16 (stop 22): batch 3 17.3 -> 13.0 ms, 5 18.7 -> 15.5, even at 8 (AMX linear)
MAX_ROWS_AMX_F32 = 32   # Intel AMX, float32 (stop 22): batch 4 38.8 -> 24.5 ms, 16 60.1 -> 45.5, 32 88.7 -> 84.0
MAX_ROWS_BF16 = 32  # bfloat16 by AVX512-BF16 (stop 19, Zen 4): batch 8 29.2 -> 14.2 ms, batch 32 58.9 -> 48.2
MAX_ROWS_F32 = 8    # float32, or bfloat16 widened to it (stop 19): batch 8 38.3 -> 28.3 ms, even at 16, 2x slower at 32


def max_rows_for(dtype: torch.dtype, cpu_flags) -> int:
    if "amx_tile" in cpu_flags:
        return MAX_ROWS_AMX_BF16 if dtype == torch.bfloat16 else MAX_ROWS_AMX_F32
    return MAX_ROWS_BF16 if dtype == torch.bfloat16 and "avx512_bf16" in cpu_flags else MAX_ROWS_F32


AMX_LINEAR_FROM_ROWS = 3  # fewer rows: the row kernel (csrc/cpu_decode_layers.c decides alike)
MAX_ROWS_AMX_LINEAR = 32  # bfloat16 with the AMX linear's packed copies (its row limit in packed_linear.AMX_ROWS)
_LINEARS = (("qkv_amx", "self_attn", "qkv_proj"), ("o_amx", "self_attn", "o_proj"),
            ("gate_up_amx", "mlp", "gate_up_proj"), ("down_amx", "mlp", "down_proj"))


class _LayerWeights(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("input_norm", "qkv", "qkv_bias", "o", "o_bias", "post_norm",
                                                     "gate_up", "down", "k_cache", "v_cache", "qkv_amx", "o_amx",
                                                     "gate_up_amx", "down_amx", "qkv_q", "o_q", "gate_up_q", "down_q",
                                                     "quant_linear")]


def unsupported_reason(model) -> Optional[str]:
    """Why this model cannot decode natively (None when it can)."""
    if getattr(model, "quantization", None) is not None:
        return "GGUF weights kept quantized"
    return layers_unsupported_reason(model)


def layers_unsupported_reason(model) -> Optional[str]:
    """Why the native call cannot run this model's layers, whatever its linear weights are (None when it can)."""
    c = model.config
    if model.norm.device.type != "cpu" or model.dtype not in cpu_native.FUSED_DTYPES:
        return "not a float32 or bfloat16 CPU model"
    if model.tp is not None or model.gemm_rows is not None:
        return "tensor parallel or deterministic GEMMs"
    if c.qk_norm:
        return "q/k norms"
    if c.rope_dim != c.head_dim:
        return "partial rotary embeddings"
    if c.clip_qkv is not None:
        return "clipped q/k/v"
    if c.mlp_bias:
        return "MLP biases"
    if c.residual_multiplier != 1.0 or c.nope_layers:
        return "a residual multiplier or layers without rope"
    if not cpu_native.available():
        return f"native kernels unavailable ({cpu_native.unavailable_reason()})"
    return None


class NativeDecode:
    """Holds the dense weights of a LlamaForCausalLM (references taken before any packing) and the
    per-layer pointer table the native call reads."""

    def __init__(self, model):
        self.model, c = model, model.config
        self.dims = (c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size)
        self.eps = float(c.rms_norm_eps)
        self.bf16 = int(model.dtype == torch.bfloat16)
        self.max_rows = max_rows_for(model.dtype, cpu_native.cpu_features())
        self._dense = []  # keeps every dense tensor alive
        self._layers = (_LayerWeights * len(model.layers))()
        for entry, layer in zip(self._layers, model.layers):
            attn = layer.self_attn
            for field, t in (("input_norm", layer.input_layernorm), ("qkv_bias", attn.qkv_bias),
                             ("o_bias", attn.o_bias), ("post_norm", layer.post_attention_layernorm)):
                setattr(entry, field, self._keep(t))
            self._bind_linears(entry, layer)
        self.lm_head = self._lm_head()  # [V, H] dense, or None where compute_logits takes the op-by-op lm head
        self._amx_linear = False  # see bind_amx_packs
        self._pool_key = None

    def _bind_linears(self, entry: _LayerWeights, layer) -> None:
        """One layer's four linear weights into its pointer table (here dense; quant_decode.py: GGUF blocks)."""
        attn, mlp = layer.self_attn, layer.mlp
        for field, t in (("qkv", attn.qkv_proj), ("o", attn.o_proj), ("gate_up", mlp.gate_up_proj),
                         ("down", mlp.down_proj)):
            setattr(entry, field, self._keep(t))

    def _lm_head(self) -> Optional[torch.Tensor]:
        return self.model.lm_head.detach().contiguous()  # [V, H]

    def bind_amx_packs(self) -> None:
        """Called by pack_weights: where every linear weight got the AMX linear's copy (bfloat16 on AMX), steps of 3
        to MAX_ROWS_AMX_LINEAR rows take it inside the native call, the GEMM the op-by-op path gives those rows; their
        lm head is then the op-by-op one (logits returns None)."""
        packs = [[getattr(getattr(getattr(layer, part), name), "_amx_pack", None) for _, part, name in _LINEARS]
                 for layer in self.model.layers]
        if (not self.bf16 or getattr(self.model.lm_head, "_amx_pack", None) is None
                or any(p is None for layer in packs for p in layer)):
            return
        for entry, layer in zip(self._layers, packs):
            for (field, _, _), (packed, _) in zip(_LINEARS, layer):
                setattr(entry, field, packed.data_ptr())
        self._amx_linear = True
        self.max_rows = max(self.max_rows, MAX_ROWS_AMX_LINEAR)

    def _keep(self, t: Optional[torch.Tensor]) -> Optional[int]:
        if t is None:
            return None
        t = t.detach().contiguous()
        self._dense.append(t)
        return t.data_ptr()

    def _bind_pool(self, pool) -> None:
        key = (pool.k_buffers[0].data_ptr(), pool.v_buffers[0].data_ptr(), len(pool.k_buffers))
        if key != self._pool_key:  # the pool's buffers are new after a resize
            for entry, k, v in zip(self._layers, pool.k_buffers, pool.v_buffers):
                entry.k_cache, entry.v_cache = k.data_ptr(), v.data_ptr()
            self._pool_key = key

    def run(self, x: torch.Tensor, fb) -> Optional[tuple]:
        """x [B, H] the step's embeddings (overwritten) -> (last layer's output [B, H], residual [B, H]), the
        K/V of every layer written into the pool; None where the step does not qualify."""
        backend = self.model.attn_backend
        step = backend.decode_step()
        rows = x.shape[0]
        if (step is None or not step.usable or not fb.is_decode or rows > self.max_rows or rows != step.rows.numel()
                or x.dtype != self.model.dtype):
            return None
        pool = backend.kv_pool
        if not all(b.is_contiguous() and b.dtype == x.dtype for b in (pool.k_buffers[0], pool.v_buffers[0])):
            return None
        self._bind_pool(pool)
        x = x.contiguous()  # the call writes the last layer's output into it
        residual = torch.empty_like(x)
        positions = fb.positions.to(torch.int64).contiguous()
        hidden, hq, hkv, head_dim, inter = self.dims
        shared = step.shared if step.shared is not None and packed_loops_take(x.dtype, head_dim) else None
        status = cpu_native.lib().radixlm_decode_layers(
            self._layers, len(self._layers), x.data_ptr(), residual.data_ptr(), rows, hidden, hq, hkv, head_dim, inter,
            self.eps, positions.data_ptr(), self.model.cos_sin.data_ptr(), step.loc.data_ptr(), step.table.data_ptr(),
            step.table.stride(0), step.rows.data_ptr(), step.lens.data_ptr(), float(backend.sm_scale), self.bf16,
            step.threads, *((shared.slots.data_ptr(), shared.length, shared.starts.data_ptr()) if shared is not None
                            else (None, 0, None)))
        if status != 0:
            raise MemoryError("native decode could not allocate its buffers")
        return x, residual

    def logits(self, hidden: torch.Tensor) -> Optional[torch.Tensor]:
        """hidden [N, H] -> logits [N, V] float32 (bf16 results rounded, as torch's bf16 lm head gives them);
        None for more than max_rows rows, and where the AMX linear takes them (bind_amx_packs)."""
        if (self.lm_head is None or hidden.shape[0] > self.max_rows or hidden.shape[0] == 0
                or hidden.dtype != self.lm_head.dtype):
            return None
        if self._amx_linear and hidden.shape[0] >= AMX_LINEAR_FROM_ROWS:
            return None   # the op-by-op lm head: the AMX linear for these rows (packed_linear.linear)
        return cpu_native.linear_rows(hidden, self.lm_head, out_f32=True)
