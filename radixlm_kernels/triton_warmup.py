"""Compile every Triton kernel variant a server can meet before it reports healthy.

A variant is fixed by the kernel's constexprs (the launch config from the tables in triton_decode.py and
triton_extend.py, head counts, head dim), its pointer dtypes and Triton's specialisation of int arguments
(a stride divisible by 16 or not).  ``warm_up_triton`` launches each kernel once per variant on small
dummy inputs shaped like the server's (the same dtypes, strides and row sizes), so the first request
compiles nothing.  Imports triton at module load: reach it only on CUDA (or under TRITON_INTERPRET=1).
"""

import time

import torch

from . import triton_decode, triton_extend, triton_kv_blocks, triton_store


def warm_up_triton(device, dtype, num_q_heads, num_kv_heads, head_dim, *, kv_dtype=None, num_layers=2,
                   max_context=4096, kv_block=64, index_dtype=torch.int64, table_dtype=torch.int32):
    """Launch every decode, extend, store_kv and KV-block-copy variant the tables can pick for this model.

    device: the CUDA device (or "cpu" under the interpreter); dtype: q/k/v activations' dtype; kv_dtype:
    the KV pool's dtype (default dtype); num_layers: the model's layers (the block copy's buffer count);
    max_context: req_to_token's row length (its stride is specialised); kv_block: the host/disk tier's
    tokens per block (an extend class longer than max_context is skipped: no request can reach it); index_dtype: seq_lens / req_pool_indices / prefix_lens / extend_lens / out_cache_loc;
    table_dtype: req_to_token's.  Returns {variant name: seconds spent}, in launch order.
    """
    device = torch.device(device)
    assert max_context >= 8, max_context
    kv_dtype = kv_dtype or dtype
    done = {}

    def run(name, fn):
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        done[name] = time.perf_counter() - t

    slots = 4 * triton_extend.SMALL_EXTEND + 8  # dummy requests' slots wrap around this many
    k_buffer = torch.zeros(slots, num_kv_heads, head_dim, dtype=kv_dtype, device=device)  # [S, Hkv, D]
    v_buffer = torch.zeros_like(k_buffer)  # [S, Hkv, D]
    table = torch.arange(2 * max_context, dtype=table_dtype, device=device).remainder_(slots)
    table = table.view(2, max_context)  # [R, C] req_to_token, the server's row length
    rows = torch.tensor([1], dtype=index_dtype, device=device)  # [B] req_pool_indices
    scale = head_dim ** -0.5

    loc = torch.arange(4, dtype=index_dtype, device=device)  # [T] out_cache_loc
    k = torch.zeros(4, num_kv_heads, head_dim, dtype=dtype, device=device)  # [T, Hkv, D]
    run("store_kv", lambda: triton_store.store_kv(k_buffer, v_buffer, loc, k, k))

    q = torch.zeros(1, num_q_heads, head_dim, dtype=dtype, device=device)  # [B, Hq, D]
    lens = torch.tensor([3], dtype=index_dtype, device=device)  # [B] seq_lens
    for splits, name in ((1, "decode single"), (2, "decode split+merge")):
        run(name, lambda s=splits: triton_decode.decode_attention(q, k_buffer, v_buffer, table, rows, lens, scale,
                                                                  num_splits=s))

    classes = ((3, "small"), (triton_extend.SMALL_EXTEND + 1, "medium"), (triton_extend.MEDIUM_EXTEND + 1, "large"))
    for ext, cls in classes:
        assert triton_extend.shape_class(ext) == cls
        if ext + 2 > max_context:
            continue  # no request this long fits a req_to_token row: the class cannot be met
        qe = torch.zeros(ext, num_q_heads, head_dim, dtype=dtype, device=device)  # [T, Hq, D]
        prefix = torch.tensor([2], dtype=index_dtype, device=device)  # [B]
        extend = torch.tensor([ext], dtype=index_dtype, device=device)  # [B]
        start = torch.zeros(1, dtype=index_dtype, device=device)  # [B]
        run(f"extend {cls}", lambda qe=qe, prefix=prefix, extend=extend, start=start, ext=ext:
            triton_extend.extend_attention(qe, k_buffer, v_buffer, table, rows, prefix, extend, scale,
                                           max_extend_len=ext, extend_start=start))

    # the KV tiers' block copy (runtime/runner/kv_blocks.py)
    bufs = [torch.zeros(2 * kv_block, num_kv_heads, head_dim, dtype=kv_dtype, device=device)
            for _ in range(2 * num_layers)]  # [S, Hkv, D] each, K then V of every layer
    staged = torch.zeros(1, len(bufs), kv_block, num_kv_heads, head_dim, dtype=kv_dtype,
                         device=device)  # [1, 2L, block, Hkv, D]
    idx = torch.arange(kv_block, dtype=torch.int64, device=device)  # [block]
    for to_pool in (False, True):
        run(f"kv blocks {'to' if to_pool else 'from'} pool",
            lambda tp=to_pool: triton_kv_blocks.kv_blocks_copy(staged, bufs, idx, kv_block, tp))
    return done
