"""Attention backends: store the new tokens' K/V in the paged pool, then attend over the block table.

The model calls, per step, `init_forward_metadata(fb)` once, then `forward(q, k, v, layer_id, fb)`
once per layer.  A backend owns no KV memory; it writes into and reads from the KVPool it was
given.  Kernels come from `radixlm.kernels` (torch reference on CPU; Triton on CUDA).
"""

import torch

from radixlm.kernels import torch_ref
from radixlm.kernels.dispatch import BACKENDS, get_attention_ops
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool

BACKEND_NAMES = BACKENDS
FP8_KV_BACKENDS = ("torch", "triton")  # their kernels read float8_e4m3fn pools with per-layer scales


class AttentionBackend:
    """Paged attention over one KVPool.

    Contract of forward(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D], layer_id, fb) -> [T, Hq, D]:
      1. mutates the pool: k_buffers[layer_id][fb.out_cache_loc[i]] = k[i] (same for v);
      2. returns, for each new token i of request b, softmax(q_i K^T * sm_scale) V over the keys of
         request b at positions 0 .. prefix_lens[b] + i (its cached prefix, then causally its own
         new tokens), with K/V read from the pool through fb.req_to_token[fb.req_pool_indices[b]].
    The caller must have written fb.req_to_token rows for every position < seq_lens[b] (the new
    tokens' slots equal out_cache_loc).  q/k/v may be non-contiguous views.
    Subclasses implement store_kv, decode and extend; decode is used when every request brings
    exactly one new token.  A model with sliding-window or soft-capped layers declares them once with
    set_layer_variants; those layers' decode and extend get window= / softcap= (torch_ref's semantics),
    the other layers run exactly as without them.
    """

    def __init__(self, kv_pool: KVPool, sm_scale: float):
        self.kv_pool = kv_pool
        self.sm_scale = sm_scale
        self._is_decode = False
        self.layer_variants = {}  # layer_id -> {"window": int or None, "softcap": float or None}

    def set_layer_variants(self, windows, softcap=None, sinks=None, chunks=None, alibi=None, alibi_bf16=None) -> None:
        """windows: per layer, its sliding window in keys (None: full attention); softcap: the score cap of
        every layer (None: none); sinks: per layer, its attention-sink logits [Hq] float32 on the pool's device
        (gpt-oss; None: none); chunks: per layer, its attention chunk (Llama 4; None: none), run by the torch
        reference kernels whatever the backend; alibi: every layer's ALiBi slopes [Hq] float32 on the pool's
        device (BLOOM, MPT; None: none), run by the ops whose variant kernels take them (torch, Triton), else by
        the torch reference; alibi_bf16: with alibi, Falcon's bfloat16-rounded biases and their scale (torch_ref's).
        Layers with none of them keep the ordinary kernels."""
        self.layer_variants = {}
        for i, w in enumerate(windows):
            sink = sinks[i] if sinks is not None else None
            chunk = chunks[i] if chunks is not None else None
            if w or softcap or sink is not None or chunk or alibi is not None:
                variant = {"window": w or None, "softcap": softcap or None}
                if sink is not None:   # only kernels of models with sinks are asked to take them
                    variant["sinks"] = sink
                if chunk:   # only the torch reference takes chunks
                    variant["chunk"] = chunk
                if alibi is not None:
                    variant["alibi"] = alibi
                    if alibi_bf16 is not None:
                        variant["alibi_bf16"] = alibi_bf16
                self.layer_variants[i] = variant

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        """Called once per model forward, before layer 0: precompute what every layer reuses.

        A mixed batch (running decodes plus prefill chunks) is split: its one-token requests go
        through the batched decode kernel, the others through extend.  The split's index tensors
        and the extend part's start offsets and longest extend are made here, once per step."""
        self._is_decode = fb.is_decode
        self._split = None
        if not self._is_decode:
            lens = fb.extend_lens_list
            dec = [b for b, e in enumerate(lens) if e == 1]
            if len(dec) > 1:
                ext = [b for b, e in enumerate(lens) if e != 1]
                starts = [0]
                for e in lens:
                    starts.append(starts[-1] + e)
                ext_starts = [0]
                for b in ext:
                    ext_starts.append(ext_starts[-1] + lens[b])
                as_long = lambda xs: torch.tensor(xs, dtype=torch.long, device=fb.input_ids.device)  # noqa: E731
                ext_rows = [t for b in ext for t in range(starts[b], starts[b + 1])]
                dec_t, ext_t = as_long(dec), as_long(ext)   # [Bd], [Be]
                self._split = (as_long([starts[b] for b in dec]), _SubBatch(fb, dec_t), as_long(ext_rows),
                               _SubBatch(fb, ext_t, as_long(ext_starts[:-1]), max((lens[b] for b in ext), default=0)))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                fb: ForwardBatch) -> torch.Tensor:
        variant = self.layer_variants.get(layer_id, {})
        if self._is_decode and not variant:
            out = self.fused_decode(q, k, v, layer_id)
            if out is not None:
                return out
        self.store_kv(layer_id, fb.out_cache_loc, k, v)
        return self.attend(q, layer_id, fb)

    def attend(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch) -> torch.Tensor:
        """forward's step 2 alone, storing nothing: q [T, Hq, D] over the K/V that layer_id's pool layer holds for
        every position (Gemma 4's layers that reuse an earlier layer's KV) -> [T, Hq, D]."""
        variant = self.layer_variants.get(layer_id, {})
        if self._is_decode:
            return self.decode(q, layer_id, fb, **variant)
        if self._split is None:
            return self.extend(q, layer_id, fb, **variant)
        dec_rows, dec, ext_rows, ext = self._split
        out = torch.empty_like(q)  # [T, Hq, D]
        out[dec_rows] = self.decode(q[dec_rows], layer_id, dec, **variant)
        if ext.max_extend_len:
            out[ext_rows] = self.extend(q[ext_rows], layer_id, ext, **variant)
        return out

    def fused_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int):
        """store_kv + decode in one call where the backend has one; None otherwise."""
        return None

    def decode_step(self):
        """This decode step's cpu_decode_step.DecodeStep where the backend makes one; None otherwise."""
        return None

    def store_kv(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        raise NotImplementedError

    def decode(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch, **variant) -> torch.Tensor:
        raise NotImplementedError

    def extend(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch, **variant) -> torch.Tensor:
        raise NotImplementedError


def _check_fp8_kv(name: str, device) -> None:
    """ValueError unless these kernels read an fp8_e4m3 pool on this device (Triton's e4m3 needs sm89+)."""
    if name not in FP8_KV_BACKENDS:
        raise ValueError(f"an fp8_e4m3 KV cache needs the triton attention backend (CUDA) or torch (on a CPU: "
                         f"--attention-backend torch); the {name} backend reads only the model dtype")
    device = torch.device(device)
    if name == "triton" and device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        raise ValueError("an fp8_e4m3 KV cache needs a GPU of compute capability 8.9+ (Ada, Hopper) for Triton's "
                         "e4m3 loads; use --attention-backend torch or the model dtype's KV cache")


class _SubBatch:
    """The per-request fields of a ForwardBatch restricted to the requests at index `sel`."""

    def __init__(self, fb: ForwardBatch, sel: torch.Tensor, extend_start=None, max_extend_len: int = 1):
        self.req_to_token = fb.req_to_token
        self.req_pool_indices = fb.req_pool_indices[sel]  # [b]
        self.prefix_lens = fb.prefix_lens[sel]  # [b]
        self.extend_lens = fb.extend_lens[sel]  # [b]
        self.seq_lens = fb.seq_lens[sel]  # [b]
        self.extend_start = extend_start  # [b] offsets in the sub-batch's own token rows
        self.max_extend_len = max_extend_len
        self.shared_prefix = None  # decodes: cpu_shared_prefix.SharedPrefix, set by a backend that has one


class KernelAttentionBackend(AttentionBackend):
    """Calls one set of kernels from radixlm.kernels (torch reference or Triton, see radixlm_kernels/dispatch.py)."""

    def __init__(self, kv_pool: KVPool, sm_scale: float, ops):
        super().__init__(kv_pool, sm_scale)
        if kv_pool.dtype == torch.float8_e4m3fn:
            _check_fp8_kv(ops.name, kv_pool.device)
        self.ops = ops
        self.name = ops.name
        self._decode_step = None
        self._extend_shared = None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        super().init_forward_metadata(fb)
        ops = self.ops
        self._decode_step = (ops.decode_step(fb.req_to_token, fb.req_pool_indices, fb.seq_lens, fb.out_cache_loc,
                                             shared_prefix=ops.shared_prefix)
                             if self._is_decode and ops.decode_step is not None else None)
        if self._split is not None and ops.shared_prefix is not None:   # a mixed step's decodes
            dec = self._split[1]
            dec.shared_prefix = ops.shared_prefix(fb.req_to_token, dec.req_pool_indices, dec.seq_lens)
        self._extend_shared = None
        if not self._is_decode and ops.extend_shared_prefix is not None:
            ext = fb if self._split is None else self._split[3]
            if ext.max_extend_len:
                self._extend_shared = ops.extend_shared_prefix(fb.req_to_token, ext.req_pool_indices, ext.prefix_lens,
                                                               ext.extend_lens)

    def decode_step(self):
        return self._decode_step  # None in other steps or where the ops have none

    def fused_decode(self, q, k, v, layer_id):
        if self._decode_step is None:
            return None
        pool = self.kv_pool
        return self._decode_step.run(q, k, v, pool.k_buffers[layer_id], pool.v_buffers[layer_id], self.sm_scale)

    def _reference_only(self, variant) -> bool:
        """Whether only the torch reference runs this layer variant: chunks, or ALiBi where the ops' variant kernels
        do not take it (the native CPU kernels)."""
        return "chunk" in variant or ("alibi" in variant and not self.ops.variant_takes_alibi)

    def _scales(self, layer_id) -> dict:
        """The layer's K and V scales for an fp8 pool; nothing for others (the CPU kernels take none)."""
        pool = self.kv_pool
        if pool.dtype != torch.float8_e4m3fn:
            return {}
        return {"k_scale": pool.k_scales[layer_id], "v_scale": pool.v_scales[layer_id]}

    def store_kv(self, layer_id, loc, k, v):
        pool = self.kv_pool
        self.ops.store_kv(pool.k_buffers[layer_id], pool.v_buffers[layer_id], loc, k, v, **self._scales(layer_id))

    def decode(self, q, layer_id, fb, **variant):
        pool = self.kv_pool
        if variant:  # window / softcap: the ops' variant kernel, else (and for chunks) the torch reference
            kernel = (None if self._reference_only(variant) else self.ops.decode_variant) or torch_ref.decode_attention
            return kernel(q, pool.k_buffers[layer_id], pool.v_buffers[layer_id], fb.req_to_token,
                          fb.req_pool_indices, fb.seq_lens, self.sm_scale, **variant,
                          **self._scales(layer_id))  # [B, Hq, D]
        shared = getattr(fb, "shared_prefix", None)  # a mixed step's decodes (ops with shared_prefix only)
        return self.ops.decode_attention(q, pool.k_buffers[layer_id], pool.v_buffers[layer_id],
                                         fb.req_to_token, fb.req_pool_indices, fb.seq_lens, self.sm_scale,
                                         **({"shared": shared} if shared is not None else {}),
                                         **self._scales(layer_id))  # [B, Hq, D]

    def extend(self, q, layer_id, fb, **variant):
        pool = self.kv_pool
        # kernels that can use the step's host-side metadata get it (no device read per layer)
        step = ({"max_extend_len": fb.max_extend_len, "extend_start": fb.extend_start}
                if self.ops.takes_step_metadata else {})
        if variant:  # window / softcap: the ops' variant kernel, else (and for chunks) the torch reference
            kernel = None if self._reference_only(variant) else self.ops.extend_variant
            if kernel is None:
                kernel, step = torch_ref.extend_attention, {}
            return kernel(q, pool.k_buffers[layer_id], pool.v_buffers[layer_id], fb.req_to_token,
                          fb.req_pool_indices, fb.prefix_lens, fb.extend_lens, self.sm_scale, **step,
                          **variant, **self._scales(layer_id))  # [T, Hq, D]
        step.update(self._scales(layer_id))
        if self._extend_shared is not None:
            step["shared"] = self._extend_shared
        return self.ops.extend_attention(q, pool.k_buffers[layer_id], pool.v_buffers[layer_id],
                                         fb.req_to_token, fb.req_pool_indices, fb.prefix_lens,
                                         fb.extend_lens, self.sm_scale, **step)  # [T, Hq, D]


def TorchAttentionBackend(kv_pool: KVPool, sm_scale: float) -> KernelAttentionBackend:
    """The torch reference kernels (radixlm_kernels/torch_ref.py); the CPU path."""
    return KernelAttentionBackend(kv_pool, sm_scale, get_attention_ops("torch"))


def create_attention_backend(name: str, kv_pool: KVPool, sm_scale: float,
                             deterministic: bool = False) -> AttentionBackend:
    """name: "auto" (Triton on CUDA, cpu or torch on CPU), "torch", "cpu" (native decode on CPU) or
    "triton" (on CPU only under TRITON_INTERPRET=1, for tests); deterministic: batch-invariant kernels
    (CPU, auto or cpu only).  Raises ValueError for an unknown or unavailable backend."""
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    device = kv_pool.k_buffers[0].device if kv_pool.k_buffers else torch.device("cpu")
    return KernelAttentionBackend(kv_pool, sm_scale, get_attention_ops(name, device, deterministic))
