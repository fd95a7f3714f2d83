"""ForwardBatch: the tensors of one model step, built by the model runner from scheduler decisions.

Every step is an "extend": each request brings extend_len new tokens on top of prefix_len tokens
already in the KV pool.  Decode is the case extend_len == 1; a mixed step (chunked prefill plus
running decodes) is just a batch with different extend_lens.
"""

from dataclasses import dataclass, field

import torch


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

    @property
    def batch_size(self) -> int:
        return int(self.extend_lens.shape[0])

    @property
    def is_decode(self) -> bool:
        """True when every request brings exactly one new token."""
        return all(e == 1 for e in self.extend_lens_list)

    @classmethod
    def build(cls, input_ids, prefix_lens, extend_lens, req_pool_indices, out_cache_loc, req_to_token,
              logits_indices=None, device="cpu"):
        """From plain lists: input_ids [T], prefix_lens/extend_lens/req_pool_indices [B], out_cache_loc [T].

        logits_indices defaults to the last new token of every request.
        """
        positions = []
        for p, e in zip(prefix_lens, extend_lens):
            positions.extend(range(p, p + e))
        if logits_indices is None:
            logits_indices, end = [], 0
            for e in extend_lens:
                end += e
                logits_indices.append(end - 1)
        as_long = lambda xs: torch.tensor(xs, dtype=torch.int64, device=device)  # noqa: E731
        prefix_t, extend_t = as_long(prefix_lens), as_long(extend_lens)
        return cls(
            input_ids=as_long(input_ids),
            positions=as_long(positions),
            out_cache_loc=as_long(out_cache_loc),
            req_pool_indices=as_long(req_pool_indices),
            prefix_lens=prefix_t,
            extend_lens=extend_t,
            seq_lens=prefix_t + extend_t,
            req_to_token=req_to_token,
            logits_indices=as_long(logits_indices),
            prefix_lens_list=list(prefix_lens),
            extend_lens_list=list(extend_lens),
        )
