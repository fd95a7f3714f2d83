"""Choose the attention kernels by device: Triton on CUDA; on CPUs the native C decode kernel (which
also runs short extends, radixlm_kernels/cpu_extend.py) with the torch reference for the rest, or the torch
reference alone when no C compiler is available.

Triton is imported only when the triton backend is chosen, so CPU users never pay for it.
"""

import functools
import logging
import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "cpu", "triton")


@dataclass(frozen=True)
class AttentionOps:
    """The three paged-attention ops of one backend; signatures and semantics as in ``torch_ref``.

    store_kv(k_buffer, v_buffer, loc, k, v)
    decode_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, seq_lens, sm_scale, out=None)
    extend_attention(q, k_buffer, v_buffer, req_to_token, req_pool_indices, prefix_lens, extend_lens,
                     sm_scale, out=None)
    takes_step_metadata: extend_attention also accepts max_extend_len (int) and extend_start ([B] offsets
    of each request's rows in q), computed once per step by the caller.
    decode_step(req_to_token, req_pool_indices, seq_lens, out_cache_loc), where given: made once per decode
    step (also given shared_prefix); its run(q, k, v, k_buffer, v_buffer, sm_scale) is store_kv +
    decode_attention in one call, or None for a layout it does not take.
    shared_prefix(req_to_token, req_pool_indices, seq_lens), where given: the keys every request of a decode
    batch shares (cpu_shared_prefix.SharedPrefix), or None; decode_attention then also takes shared=.
    extend_shared_prefix(req_to_token, req_pool_indices, prefix_lens, extend_lens), where given: the cached keys
    every request of an extend step holds (SharedPrefix.find_for_extend), or None; extend_attention then also
    takes shared=.
    decode_variant / extend_variant: decode_attention / extend_attention that also take window= and softcap=
    (torch_ref's sliding window and score soft-capping), for the layers that have them; None: the backend runs
    those layers with the torch reference; variant_takes_alibi: both also take alibi= (torch_ref's ALiBi slopes),
    else the backend runs ALiBi layers with the torch reference.
    The torch and triton ops (the ones that read float8_e4m3fn pools) also take k_scale= / v_scale= in store_kv,
    decode_attention, extend_attention and both variants.
    """

    name: str
    store_kv: Callable
    decode_attention: Callable
    extend_attention: Callable
    takes_step_metadata: bool = False  # extend_attention also takes max_extend_len= and extend_start=
    decode_step: Optional[Callable] = None
    shared_prefix: Optional[Callable] = None
    extend_shared_prefix: Optional[Callable] = None
    decode_variant: Optional[Callable] = None
    extend_variant: Optional[Callable] = None
    variant_takes_alibi: bool = False


def triton_interpreter_enabled() -> bool:
    """True when TRITON_INTERPRET asks Triton to run kernels on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def _torch_ops() -> AttentionOps:
    from . import torch_ref

    return AttentionOps("torch", torch_ref.store_kv, torch_ref.decode_attention,
                        torch_ref.extend_attention, decode_variant=torch_ref.decode_attention,
                        extend_variant=torch_ref.extend_attention, variant_takes_alibi=True)


def _cpu_ops() -> AttentionOps:
    """Native decode (radixlm_kernels/csrc), extend batched through it (cpu_extend), the torch reference's store."""
    from . import cpu_decode_step, cpu_extend, cpu_native, cpu_window, torch_ref
    from .cpu_shared_prefix import SharedPrefix

    if not cpu_native.available():
        raise ValueError(f"the cpu attention backend is unavailable: {cpu_native.unavailable_reason()}")
    return AttentionOps("cpu", torch_ref.store_kv, cpu_native.decode_attention, cpu_extend.extend_attention,
                        decode_step=cpu_decode_step.DecodeStep, shared_prefix=SharedPrefix.find,
                        extend_shared_prefix=SharedPrefix.find_for_extend,
                        decode_variant=cpu_window.decode_attention, extend_variant=cpu_window.extend_attention)


def _batch_invariant_ops() -> AttentionOps:
    """Native decode for every query token, decode and extend alike (batch_invariant.py)."""
    from . import batch_invariant, cpu_decode_step, cpu_native, cpu_window, torch_ref

    if not cpu_native.available():
        raise ValueError("deterministic inference needs the native CPU attention kernels, which are unavailable: "
                         f"{cpu_native.unavailable_reason()}")
    return AttentionOps("cpu-deterministic", torch_ref.store_kv, cpu_native.decode_attention,
                        batch_invariant.extend_attention, decode_step=cpu_decode_step.DecodeStep,
                        decode_variant=cpu_window.decode_attention,
                        extend_variant=functools.partial(cpu_window.extend_attention, per_token=True))


def _triton_ops() -> AttentionOps:
    from . import triton_decode, triton_extend, triton_store

    return AttentionOps("triton", triton_store.store_kv, triton_decode.decode_attention,
                        triton_extend.extend_attention, takes_step_metadata=True,
                        decode_variant=triton_decode.decode_attention, extend_variant=triton_extend.extend_attention,
                        variant_takes_alibi=True)


def get_attention_ops(backend: str = "auto", device="cpu", deterministic: bool = False) -> AttentionOps:
    """Return the store_kv / decode_attention / extend_attention ops for ``backend`` on ``device``.

    deterministic: ops whose result for a query token depends only on that token's query and keys
    (never on the batch): on CPUs only, with backend "auto" or "cpu"; ValueError otherwise.

    backend: "auto" (triton on CUDA; on CPUs cpu when its kernel builds, else torch), "torch", "cpu"
    (CPU only) or "triton".  "triton" on a
    non-CUDA device works only under the Triton interpreter (TRITON_INTERPRET=1 set before triton
    is first imported) and raises ValueError otherwise.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    device_type = torch.device(device).type
    if deterministic:
        if device_type != "cpu" or backend not in ("auto", "cpu"):
            raise ValueError(f"deterministic inference runs on the CPU with the auto or cpu attention backend, "
                             f"not {backend!r} on {device!r}")
        return _batch_invariant_ops()
    if backend == "torch":
        return _torch_ops()
    if backend == "cpu":
        if device_type != "cpu":
            raise ValueError(f"the cpu attention backend runs on the CPU only, got {device!r}")
        return _cpu_ops()
    if backend == "auto":
        if device_type == "cpu":
            from . import cpu_native

            return _cpu_ops() if cpu_native.available() else _torch_ops()
        if device_type != "cuda":
            return _torch_ops()
        try:
            return _triton_ops()
        except ImportError as exc:
            logger.warning("triton unavailable (%s); using the torch attention reference on %s",
                           exc, device)
            return _torch_ops()
    if device_type != "cuda" and not triton_interpreter_enabled():
        raise ValueError(
            f"the triton attention backend needs a CUDA device, got {device!r}; on the CPU set "
            "TRITON_INTERPRET=1 before importing triton (slow, for tests) or use backend='torch'")
    ops = _triton_ops()
    if device_type != "cuda" and not _kernels_interpreted():
        raise ValueError(
            "the triton attention kernels were first imported without TRITON_INTERPRET=1, so they "
            f"are compiled for a GPU and cannot run on {device!r}; set it before the first import")
    return ops


def _kernels_interpreted() -> bool:
    """Whether the Triton kernels were decorated in interpreter mode (decided at import time)."""
    from . import triton_decode

    return type(triton_decode._decode_split_kernel).__name__ == "InterpretedFunction"
