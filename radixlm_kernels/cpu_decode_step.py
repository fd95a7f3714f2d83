"""A decode step's attention on CPU in one native call per layer (csrc/cpu_decode_step.c): the new
tokens' K/V stored, attention over the pool, the result in the model's dtype.

`DecodeStep` converts the step's index tensors once (every layer reuses them) and, where given
shared_prefix (cpu_shared_prefix.SharedPrefix.find), finds the keys every request shares, to attend them
once for all; `run` returns None for a layout the call does not take (the caller then stores and attends
op by op).
"""

from typing import Callable, Optional

import torch

from . import cpu_native


class DecodeStep:
    def __init__(self, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                 out_cache_loc: torch.Tensor, shared_prefix: Optional[Callable] = None):
        self.table = req_to_token
        self.rows = req_pool_indices.to(torch.int64).contiguous()   # [B]
        self.lens = seq_lens.to(torch.int64).contiguous()           # [B]
        self.loc = out_cache_loc.to(torch.int64).contiguous()       # [B]
        self.threads = torch.get_num_threads()
        self.usable = (req_to_token.dtype == torch.int32 and req_to_token.is_contiguous()
                       and self.rows.numel() == self.loc.numel())
        self.shared = shared_prefix(req_to_token, self.rows, self.lens) if shared_prefix and self.usable else None

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
            sm_scale: float) -> Optional[torch.Tensor]:
        """q [B, Hq, D], k, v [B, Hkv, D] (views whose heads are contiguous within a row) -> [B, Hq, D] in q's
        dtype, after writing k, v into the pool at the step's slots; None where the layout does not fit."""
        dtype, (batch, num_q_heads, head_dim) = k_buffer.dtype, q.shape
        if not (self.usable and dtype in cpu_native.FUSED_DTYPES and q.dtype == k.dtype == v.dtype == dtype
                and v_buffer.dtype == dtype and batch == self.rows.numel() and k_buffer.is_contiguous()
                and v_buffer.is_contiguous() and all(t.stride(2) == 1 and t.stride(1) == head_dim for t in (q, k, v))):
            return None
        out = torch.empty((batch, num_q_heads, head_dim), dtype=dtype)
        prior = self.shared.attend(q, k_buffer, v_buffer, sm_scale) if self.shared is not None else None  # (o, lse)
        after = ((self.shared.starts.data_ptr(), prior[0].data_ptr(), prior[1].data_ptr()) if prior is not None
                 else (None, None, None))
        status = cpu_native.lib().radixlm_decode_step(
            q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), self.loc.data_ptr(),
            k_buffer.data_ptr(), v_buffer.data_ptr(), int(dtype == torch.bfloat16), self.table.data_ptr(),
            self.table.stride(0), self.rows.data_ptr(), self.lens.data_ptr(), batch, num_q_heads, k_buffer.shape[1],
            head_dim, float(sm_scale), out.data_ptr(), self.threads, *after)
        if status != 0:
            raise MemoryError("native decode attention could not allocate its buffers")
        return out
