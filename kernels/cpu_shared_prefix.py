"""A prefix of keys that every request of a decode step shares, attended once for all of them.

When many chats run on one system prompt, the radix cache hands each of them the same KV slots for it, and
a decode step's attention spends most of its time scoring every request's one query against those same
keys. Here the shared keys are attended as one matrix product: all the step's query rows against them, by
torch's CPU flash kernel (GEMM tiles, AMX for bf16 where the CPU has it), which also returns each row's
log-sum-exp. The native decode kernel then attends to each request's own keys after the prefix and merges
the two exactly (csrc/cpu_decode_attention.c, radixlm_decode_attention_after):
    o = (o1 e^l1 + sum_j e^s_j v_j) / (e^l1 + sum_j e^s_j).
"""

from typing import Optional

import torch

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
# where the matrix product pays for its setup (about 80 us a layer): requests x shared keys, measured with the
# shared keys in cache (bench/README.md, stop 15: 16 x 512 bf16 keys 1.3x faster, 16 x 256 and 4 x 1024 slower)
MIN_WORK = 8192
MIN_KEYS = 256
MIN_BATCH = 4


class SharedPrefix:
    """The first `length` keys of every request of a decode step, the same slots in every row."""

    def __init__(self, slots: torch.Tensor, batch: int):
        self.length = slots.numel()
        first = int(slots[0])
        in_order = int(slots[-1]) - first == self.length - 1 and bool((slots.diff() == 1).all())
        self._keys = slice(first, first + self.length) if in_order else slots   # a view where the slots run in order
        self.starts = torch.full((batch,), self.length, dtype=torch.int64)      # [B] where each one's own keys begin

    @classmethod
    def find(cls, req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor) -> Optional["SharedPrefix"]:
        """The longest run of leading slots that every request's row holds, if at least MIN_KEYS long and
        MIN_WORK requests x keys; the last key of every request (its new token) is never part of it."""
        batch = rows.numel()
        if batch < MIN_BATCH:
            return None
        width = int(seq_lens.min()) - 1
        if width < max(MIN_KEYS, -(-MIN_WORK // batch)):
            return None
        first = req_to_token[rows, 0]                                        # [B]: most unshared batches differ here
        if bool((first != first[0]).any()):
            return None
        table = req_to_token[rows, :width]                                   # [B, width]
        differs = (table != table[:1]).any(0).nonzero()                     # columns where some row differs
        length = int(differs[0]) if differs.numel() else width
        if length < MIN_KEYS or length * batch < MIN_WORK:
            return None
        return cls(table[0, :length].to(torch.int64), batch)

    def attend(self, q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, sm_scale: float):
        """q [B, Hq, D] (heads contiguous within a row) -> (o [B, Hq, D], lse [B, Hq]), float32, contiguous:
        each query row's attention over the shared keys and the log-sum-exp of its scaled scores."""
        batch, num_q_heads, head_dim = q.shape
        num_kv_heads = k_buffer.shape[1]
        group = num_q_heads // num_kv_heads
        if isinstance(self._keys, slice):
            keys, values = k_buffer[self._keys], v_buffer[self._keys]        # [P, Hkv, D] views
        else:
            keys, values = k_buffer.index_select(0, self._keys), v_buffer.index_select(0, self._keys)
        # rows (request, query head of the group) per KV head, so the keys are not repeated per query head
        rows = q.unflatten(1, (num_kv_heads, group)).permute(1, 0, 2, 3).reshape(1, num_kv_heads, batch * group,
                                                                                 head_dim).to(k_buffer.dtype)
        o, lse = _flash(rows, keys.permute(1, 0, 2).unsqueeze(0), values.permute(1, 0, 2).unsqueeze(0), 0.0, False,
                        scale=sm_scale)                                      # [1, Hkv, B*G, D], [1, Hkv, B*G]
        out = torch.empty((batch, num_kv_heads, group, head_dim), dtype=torch.float32)
        out.copy_(o.view(num_kv_heads, batch, group, head_dim).permute(1, 0, 2, 3))
        lse = lse.view(num_kv_heads, batch, group).permute(1, 0, 2).to(torch.float32).contiguous()
        return out.view(batch, num_q_heads, head_dim), lse.view(batch, num_q_heads)
