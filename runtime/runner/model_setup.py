"""Builds the model with its KV pool and attention backend, sizing the pool from a token budget."""

import logging
import os

import torch

from radixlm.runtime.models.loader import load_model, resolve_load_format
from radixlm.runtime.models.packed_linear import amx_pack_available, rows_pack_available
from radixlm.runtime.runner.attention_backend import create_attention_backend
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool

logger = logging.getLogger(__name__)
MAX_DEFAULT_TOKENS = 1 << 19
# --deterministic: rows of every GEMM (README: Determinism has the cost of the sizes measured)
DETERMINISTIC_GEMM_ROWS = 16


# native one-call decode keeps a dense copy of weights packed for oneDNN, and float32 decode batches of 40-64 rows
# a copy packed by MKL (packed_linear.add_rows_pack): each only while it is this small a share of the free memory
# (RADIXLM_DISABLE_NATIVE_DECODE=1, RADIXLM_DISABLE_ROWS_PACK=1 turn them off)
NATIVE_DECODE_MAX_MEMORY_SHARE = 0.1


# CUDA: the prefill run before the KV pool is sized, so the activations' peak is held back from it
WARMUP_TOKENS = 4096


def kv_budget(config, dtype, max_total_tokens, mem_fraction, device, free_bytes=None) -> int:
    """KV slots: --max-total-tokens when given, else mem_fraction of the free memory (free_bytes, or
    what the device reports now)."""
    if max_total_tokens:
        return int(max_total_tokens)
    per_token = KVPool.bytes_per_token(config.kv_layers, config.num_kv_heads, config.head_dim, dtype, config.kv_v_is_k)
    if per_token == 0:   # no layer keeps KV (the Mamba stacks): the slots only count tokens
        return MAX_DEFAULT_TOKENS
    free = _free_bytes(device) if free_bytes is None else free_bytes
    tokens = int(free * mem_fraction // per_token)
    return max(256, min(tokens, MAX_DEFAULT_TOKENS))


def warm_up(model, table, num_tokens: int, device) -> None:
    """One prefill of num_tokens tokens through row 0 of the block table `table` [R, C] and slots
    0..num_tokens-1 of the model's pool (which must hold them); the row is zeroed afterwards.  At most
    C - 1 tokens: positions stay inside the context."""
    n = min(num_tokens, table.shape[1] - 1)
    table[0, :n] = torch.arange(n, dtype=torch.int32, device=device)  # [n]
    fb = ForwardBatch.build([0] * n, [0], [n], [0], list(range(n)), table, device=device)
    with torch.inference_mode():
        model.compute_logits(model.forward(fb)[fb.logits_indices])  # [1, V]
    table[0].zero_()


def resize_after_warm_up(model, pool, table, budget_of_free_bytes, device) -> None:
    """CUDA: a warm-up prefill on the provisional pool, then the pool resized to
    budget_of_free_bytes(free) + 1 slots, where free = free device memory plus what the caching
    allocator holds unused, less the warm-up's activation peak (every prefill needs it again)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    warm_up(model, table, WARMUP_TOKENS, device)
    torch.cuda.synchronize(device)
    activations = torch.cuda.max_memory_allocated(device) - torch.cuda.memory_allocated(device)
    pool.resize(0)
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    slots = budget_of_free_bytes(max(0, free + cached - activations)) + 1
    pool.resize(slots)
    logger.info("KV pool sized after a %d-token warm-up: activations %.0f MiB, %d slots", WARMUP_TOKENS,
                activations / 2**20, slots - 1)


def _enable_native_decode(model, device) -> None:
    disabled = os.environ.get("RADIXLM_DISABLE_NATIVE_DECODE", "").strip() in ("1", "true", "yes")
    if disabled or torch.device(device).type != "cpu":
        return
    if not _weights_copy_fits(model, device, "native decode", "a dense copy"):
        return
    reason = model.enable_native_decode()
    if reason is not None:
        logger.info("native decode off: %s", reason)


def _weights_copy_fits(model, device, what: str, copy: str) -> bool:
    """Whether another copy of the model's weights stays under NATIVE_DECODE_MAX_MEMORY_SHARE of the free memory
    (logs why `what` is off when not)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    if weights <= NATIVE_DECODE_MAX_MEMORY_SHARE * _free_bytes(device):
        return True
    logger.info("%s off: %s of the %.0f MiB of weights would exceed %.0f%% of free memory", what, copy,
                weights / 2**20, 100 * NATIVE_DECODE_MAX_MEMORY_SHARE)
    return False


STATE_SHARE = 0.25   # of the free memory after the weights and the KV pool: the most recurrent states may take


def recurrent_rows(states, num_rows: int, device, copies: int = 1) -> int:
    """How many request rows a hybrid model's recurrent states (RecurrentStates) get: num_rows, or fewer where their
    states, `copies` per row (2 with the radix cache's snapshots), would take more than STATE_SHARE of the free memory
    (a Granite 4.0 H-Small row: 146 MiB).  At least 1."""
    fit = int(STATE_SHARE * _free_bytes(device)) // (states.bytes_per_row() * copies) - 1   # - 1: padding's scratch
    if fit < num_rows:
        logger.warning("recurrent state: %.1f MiB a request (%d copies); %d request rows fit in %d%% of the free "
                       "memory, not %d (--max-running-requests)", states.bytes_per_row() / 2**20, copies, max(fit, 1),
                       int(STATE_SHARE * 100), num_rows)
    return max(1, min(num_rows, fit))


def _free_bytes(device) -> int:
    if str(device).startswith("cuda"):
        free, _ = torch.cuda.mem_get_info()
        return free
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def build_model(model_path, dtype, device, attention_backend: str, budget_fn, deterministic: bool = False, tp=None,
                load_format=None, quantization=None, kv_dtype=None, gguf=None):
    """-> (model, ModelConfig, KVPool).  budget_fn(config) -> number of KV slots.  deterministic: logits that
    do not depend on the batch (fixed GEMM shapes, batch-invariant attention; CPU only, else ValueError).
    tp (distributed.group.TensorParallel): the model and pool hold this rank's shard; rank 0 sets the slots.
    load_format: loader.LOAD_FORMATS (default $RADIXLM_LOAD_FORMAT, else auto; dummy: random weights, not with tp).
    quantization: None or "fp8" (loader.load_model); kv_dtype: the KV pool's dtype (default: dtype).
    gguf: a .gguf file whose weights are loaded kept quantized (CPU, not with tp or dummy)."""
    holder = {}
    load_format = resolve_load_format(load_format)
    if gguf is not None and (tp is not None or load_format == "dummy" or torch.device(device).type != "cpu"):
        raise ValueError("GGUF weights are kept quantized on a CPU, one rank, real weights only")
    if tp is not None and load_format == "dummy":
        raise ValueError("--load-format dummy does not work with --tp-size > 1 yet (the shards load from files)")
    if tp is not None:
        from radixlm.runtime.distributed.sharding import agreed_budget, load_sharded_model
        budget_fn = agreed_budget(tp, budget_fn)

    def factory(config):
        slots = budget_fn(config)
        pool = KVPool(config.kv_layers, slots, config.num_kv_heads, config.head_dim, dtype=kv_dtype or dtype,
                      device=device, v_is_k=config.kv_v_is_k)
        holder["pool"] = pool
        return create_attention_backend(attention_backend, pool, config.sm_scale, deterministic)

    if tp is None:
        model, config = load_model(model_path, dtype=dtype, attn_backend_factory=factory, device=device,
                                   load_format=load_format, quantization=quantization, gguf=gguf)
    else:
        if quantization:
            raise ValueError("--quantization does not work with --tp-size > 1 yet (the shards load dense weights)")
        model, config = load_sharded_model(model_path, dtype, factory, device, tp)
    if not deterministic:
        _enable_native_decode(model, device)
    rows_pack = (not deterministic and dtype == torch.float32 and rows_pack_available(dtype, device)
                 and _weights_copy_fits(model, device, "MKL packing for 40-64-row decode batches", "an MKL copy"))
    amx_pack = (not deterministic and dtype == torch.bfloat16 and amx_pack_available(dtype, device)
                and _weights_copy_fits(model, device, "the AMX linear for decode batches", "an AMX copy"))
    if model.pack_weights(rows_pack=rows_pack, amx_pack=amx_pack):
        logger.info("linear weights packed for the CPU GEMM%s", " (and by MKL for 40-64-row batches)" if rows_pack
                    else " (and for the AMX linear, decode batches of up to 32 rows)" if amx_pack else "")
    if model.native_decode is not None:  # its row limit known once the weights are packed
        logger.info("native decode for steps of up to %d rows (one call per step)", model.native_decode.max_rows)
    if deterministic:
        model.make_batch_invariant(DETERMINISTIC_GEMM_ROWS)
        logger.info("deterministic: GEMMs of %d rows, batch-invariant attention", DETERMINISTIC_GEMM_ROWS)
    return model, config, holder["pool"]
