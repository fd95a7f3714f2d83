"""ForwardBatch: the tensors of one model step, built by the model runner from scheduler decisions.

Every step is an "extend": each request brings extend_len new tokens on top of prefix_len tokens
already in the KV pool.  Decode is the case extend_len == 1; a mixed step (chunked prefill plus
running decodes) is just a batch with different extend_lens.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch

from radixlm.runtime.runner.step_inputs import plain_tensors


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor         # [T] int64, new tokens of all requests, concatenated
    positions: torch.Tensor         # [T] int64, absolute position of each new token
    out_cache_loc: torch.Tensor     # [T] int64, KV slot that receives each new token
    req_pool_indices: torch.Tensor  # [B] int64, row of each request in req_to_token
    prefix_lens: torch.Tensor       # [B] int64, tokens already in the KV pool
    extend_lens: torch.Tensor       # [B] int64, new tokens this step
    seq_lens: torch.Tensor          # [B] int64, prefix_lens + extend_lens
    req_to_token: torch.Tensor      # [R, max_context] int32, position -> slot
    logits_indices: torch.Tensor    # [N] int64, rows of the [T, hidden] output that need logits
    prefix_lens_list: list = field(default_factory=list)
    extend_lens_list: list = field(default_factory=list)
    extend_start: Optional[torch.Tensor] = None  # [B] int64, offset of each request's first new token in [T]
    max_extend_len: int = 0                      # max(extend_lens), known on the host (no device read per layer)

    @property
    def batch_size(self) -> int:
        return int(self.extend_lens.shape[0])

    @property
    def is_decode(self) -> bool:
        """True when every request brings exactly one new token."""
        return all(e == 1 for e in self.extend_lens_list)

    @classmethod
    def build(cls, input_ids, prefix_lens, extend_lens, req_pool_indices, out_cache_loc, req_to_token,
              logits_indices=None, device="cpu", stager=None):
        """From plain lists: input_ids [T], prefix_lens/extend_lens/req_pool_indices [B], out_cache_loc [T].

        logits_indices defaults to the last new token of every request.  stager: a
        step_inputs.StepInputStager that moves the lists in one copy (default: one tensor each).
        """
        max_extend = max(extend_lens, default=0)
        if max_extend == 1:   # decodes: one token a request
            positions, starts = list(prefix_lens), list(range(len(prefix_lens)))
        else:
            positions, starts, end = [], [], 0
            for p, e in zip(prefix_lens, extend_lens):
                positions.extend(range(p, p + e))
                starts.append(end)
                end += e
        if logits_indices is None:
            logits_indices = [s + e - 1 for s, e in zip(starts, extend_lens)]
        lists = [input_ids, positions, out_cache_loc, req_pool_indices, prefix_lens, extend_lens,
                 [p + e for p, e in zip(prefix_lens, extend_lens)], logits_indices, starts]
        tensors = stager.to_device(lists) if stager is not None else plain_tensors(lists, device)  # [len(xs)] each
        ids_t, pos_t, loc_t, rows_t, prefix_t, extend_t, seq_t, logits_t, start_t = tensors
        return cls(
            input_ids=ids_t, positions=pos_t, out_cache_loc=loc_t, req_pool_indices=rows_t,
            prefix_lens=prefix_t, extend_lens=extend_t, seq_lens=seq_t, req_to_token=req_to_token,
            logits_indices=logits_t, prefix_lens_list=list(prefix_lens), extend_lens_list=list(extend_lens),
            extend_start=start_t, max_extend_len=max_extend,
        )
