"""A prefix of keys that every request of a decode step shares, attended once for all of them.

When many chats run on one system prompt, the radix cache hands each of them the same KV slots for it, and
a decode step's attention spends most of its time scoring every request's one query against those same
keys. Here the shared keys are attended as one matrix product: all the step's query rows against them, with
each row's log-sum-exp. The native decode kernel then attends to each request's own keys after the prefix and
merges the two exactly (csrc/cpu_decode_attention.c, radixlm_decode_attention_after):
    o = (o1 e^l1 + sum_j e^s_j v_j) / (e^l1 + sum_j e^s_j).
The product: bfloat16 on a CPU with AMX through torch's CPU flash kernel (GEMM tiles on the tile unit); elsewhere
the packed loops of csrc/cpu_shared_keys.c (radixlm_shared_keys_attention: the keys gathered once per KV head into
the layout the loops read; bfloat16 by AVX512-BF16 pair products where the CPU has them, else widened to float32
for FMA loops), where torch's kernel reached 63-86 GFLOP/s on a Zen 4 (bench/README.md, stop 21).
"""

import functools
from typing import Optional

import torch

from . import cpu_native, cpu_packed

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
# where the matrix product pays for its setup (about 80 us a layer): requests x shared keys, measured with the
# shared keys in cache (bench/README.md, stop 15: 16 x 512 bf16 keys 1.3x faster, 16 x 256 and 4 x 1024 slower)
MIN_WORK = 8192
MIN_KEYS = 256
MIN_BATCH = 4
# the packed loops' bfloat16 mode (csrc/cpu_shared_keys.c): -1 the pair products where built (AVX512-BF16: softmax
# weights rounded to bfloat16, as torch's kernel rounds them), else widened to float32; 1 always widened
BF16_MODE = -1


class SharedPrefix:
    """The first `length` keys of every request of a step, the same slots in every row; starts [batch] where each
    request's own keys begin."""

    def __init__(self, slots: torch.Tensor, batch: int):
        self.length = slots.numel()
        first = int(slots[0])
        in_order = int(slots[-1]) - first == self.length - 1 and bool((slots.diff() == 1).all())
        self._keys = slice(first, first + self.length) if in_order else slots   # a view where the slots run in order
        self.slots = slots.contiguous()                                          # [P] int64
        self.starts = torch.full((batch,), self.length, dtype=torch.int64)      # [B] where each one's own keys begin

    @classmethod
    def find(cls, req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: torch.Tensor) -> Optional["SharedPrefix"]:
        """The longest run of leading slots that every request's row holds, if at least MIN_KEYS long and
        MIN_WORK requests x keys; the last key of every request (its new token) is never part of it."""
        batch = rows.numel()
        if batch < MIN_BATCH:
            return None
        return cls._leading_run(req_to_token, rows, int(seq_lens.min()) - 1, batch, batch)

    @classmethod
    def find_for_extend(cls, req_to_token: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor,
                        extend_lens: torch.Tensor) -> Optional["SharedPrefix"]:
        """The same for an extend step: the longest run of leading cached slots that every request's row holds,
        if at least MIN_KEYS long and MIN_WORK new tokens x keys, among two or more requests (each request's new
        tokens then attend to only their own keys after it, csrc/cpu_extend_attention.c)."""
        batch = rows.numel()
        if batch < 2:
            return None
        return cls._leading_run(req_to_token, rows, int(prefix_lens.min()), int(extend_lens.sum()), batch)

    @classmethod
    def _leading_run(cls, req_to_token, rows, width, queries, batch):
        if width < max(MIN_KEYS, -(-MIN_WORK // queries)):
            return None
        first = req_to_token[rows, 0]                                        # [B]: most unshared batches differ here
        if bool((first != first[0]).any()):
            return None
        table = req_to_token[rows, :width]                                   # [B, width]
        differs = (table != table[:1]).any(0).nonzero()                     # columns where some row differs
        length = int(differs[0]) if differs.numel() else width
        if length < MIN_KEYS or length * queries < MIN_WORK:
            return None
        return cls(table[0, :length].to(torch.int64), batch)

    def attend(self, q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, sm_scale: float):
        """q [N, Hq, D] (heads contiguous within a row; a decode step's N requests, or an extend's N new tokens)
        -> (o [N, Hq, D], lse [N, Hq]), float32, contiguous: each query row's attention over the shared keys and
        the log-sum-exp of its scaled scores."""
        batch, num_q_heads, head_dim = q.shape
        num_kv_heads = k_buffer.shape[1]
        if _packed_loops(q, k_buffer, v_buffer):
            return self._attend_packed(q, k_buffer, v_buffer, sm_scale)
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

    def _attend_packed(self, q, k_buffer, v_buffer, sm_scale):
        batch, num_q_heads, head_dim = q.shape
        out = torch.empty((batch, num_q_heads, head_dim), dtype=torch.float32)
        lse = torch.empty((batch, num_q_heads), dtype=torch.float32)
        status = cpu_native.lib().radixlm_shared_keys_attention(
            q.data_ptr(), q.stride(0), k_buffer.data_ptr(), v_buffer.data_ptr(),
            BF16_MODE if q.dtype == torch.bfloat16 else 0,
            self.slots.data_ptr(), self.length, batch, num_q_heads, k_buffer.shape[1], head_dim, float(sm_scale),
            out.data_ptr(), lse.data_ptr(), torch.get_num_threads())
        if status != 0:
            raise MemoryError("native shared-keys attention could not allocate its buffers")
        return out, lse


def _packed_loops(q, k_buffer, v_buffer) -> bool:
    """Whether the FMA loops take this step: q and KV of one dtype the loops take for its head dim, heads
    contiguous within q's rows, contiguous pool buffers."""
    dtype, head_dim = k_buffer.dtype, q.shape[2]
    return (q.dtype == dtype == v_buffer.dtype and q.stride(2) == 1 and q.stride(1) == head_dim
            and k_buffer.is_contiguous() and v_buffer.is_contiguous() and packed_loops_take(dtype, head_dim))


@functools.lru_cache(maxsize=None)
def packed_loops_take(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether the FMA loops (radixlm_shared_keys_attention) attend shared keys of this dtype and head dim here:
    float32, or bfloat16 on a CPU without AMX (with it, torch's flash kernel runs bfloat16 on the tile unit).
    Asked once per layer and step, answered once per process (it asks the library)."""
    if dtype not in cpu_native.FUSED_DTYPES or not cpu_packed.f32_extend_available(head_dim):
        return False
    return dtype == torch.float32 or not cpu_packed.amx_extend_available(head_dim)
