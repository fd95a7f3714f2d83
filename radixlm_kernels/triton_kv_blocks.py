"""Gather / scatter of KV blocks between every layer's K and V pool buffers and one staging tensor, in
one launch (the host KV tier and disk tier's device side; runtime/runner/kv_blocks.py).

Reference semantics: for token t of block b = t // block, buffer i (K of every layer, then V):
staged[b, i, t % block] <-> buffers[i][slots[t]], rows of [Hkv, D] viewed as 4-byte (or 1-byte) words.
The buffers are reached through a device table of their addresses, so one program per (token, buffer)
copies one row whatever the layer count.  Imports triton at module load: import it only on CUDA (or
under TRITON_INTERPRET=1 in tests).
"""

import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["num_bufs", "block"])
def _kv_blocks_kernel(Staged, BufPtrs, Slots, num_bufs, block,
                      ROW: tl.constexpr, BLOCK_R: tl.constexpr, TO_POOL: tl.constexpr):
    """Program (t, i): row slots[t] of buffer i <-> staged row ((t // block) * num_bufs + i) * block + t % block.
    ROW: words per row; Staged is a tensor of those words, BufPtrs int64 addresses."""
    t = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1)
    slot = tl.load(Slots + t).to(tl.int64)
    base = tl.load(BufPtrs + i).to(tl.pointer_type(Staged.dtype.element_ty))
    staged_row = ((t // block) * num_bufs + i) * block + t % block
    pool = base + slot * ROW
    stage = Staged + staged_row * ROW
    for c in tl.static_range(0, ROW, BLOCK_R):
        offs = c + tl.arange(0, BLOCK_R)  # [BLOCK_R] words of the row
        mask = offs < ROW
        if TO_POOL:
            tl.store(pool + offs, tl.load(stage + offs, mask=mask), mask=mask)
        else:
            tl.store(stage + offs, tl.load(pool + offs, mask=mask), mask=mask)


_PTR_TABLES: dict = {}


def _ptr_table(buffers, device):
    """[len(buffers)] int64 addresses on the device, cached per buffer set (a pool is rarely resized)."""
    key = (str(device), tuple(b.data_ptr() for b in buffers))
    table = _PTR_TABLES.get(key)
    if table is None:
        if len(_PTR_TABLES) >= 8:
            _PTR_TABLES.clear()
        table = torch.tensor(key[1], dtype=torch.int64, device=device)  # [num_bufs]
        _PTR_TABLES[key] = table
    return table


def kv_blocks_copy(staged, buffers, slots, block, to_pool):
    """staged: contiguous [blocks, len(buffers), block, *row] (any dtype, the pool's); buffers: contiguous
    [num_slots, *row] tensors of one dtype and row size on staged's device; slots: [blocks * block] int
    on that device.  to_pool: staged rows into buffers[i][slots] (else the reverse)."""
    num_tokens = slots.numel()
    if num_tokens == 0:
        return
    row_bytes = buffers[0][0].numel() * buffers[0].element_size()
    assert staged.is_contiguous() and staged.numel() * staged.element_size() == num_tokens * len(buffers) * row_bytes
    assert all(b.is_contiguous() and b.dtype == buffers[0].dtype for b in buffers)
    word = torch.int32 if row_bytes % 4 == 0 else torch.uint8
    row = row_bytes // word.itemsize
    words = staged.view(torch.uint8).view(word)  # [blocks * bufs * block * row]
    block_r = min(1024, triton.next_power_of_2(row))
    _kv_blocks_kernel[(num_tokens, len(buffers))](
        words, _ptr_table(buffers, staged.device), slots.contiguous(), len(buffers), block,
        ROW=row, BLOCK_R=block_r, TO_POOL=bool(to_pool), num_warps=4 if block_r >= 512 else 1,
    )
