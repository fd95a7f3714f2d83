"""The tensor-parallel process group: this rank's place in it and the collectives of the sharded model.

gloo on CPU, NCCL on CUDA for the model's collectives (all-reduce, all-gather), plus a gloo group for the
step channel (step_sync.py), whose waits have no practical timeout: a worker waits there while the server
is idle.  A peer that dies closes its sockets, so a rank waiting on it fails at once instead of hanging;
COLLECTIVE_TIMEOUT bounds the rest (a peer that is alive but stuck).
"""

import logging
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

logger = logging.getLogger(__name__)
COLLECTIVE_TIMEOUT = timedelta(seconds=120)
STEP_CHANNEL_TIMEOUT = timedelta(days=365)


class TensorParallel:
    """rank in 0..size-1; rank 0 leads (runs the scheduler and broadcasts steps).  Every collective must be
    called by all ranks in the same order with tensors of the same shape."""

    def __init__(self, size: int, rank: int, init_addr: str, device: str, local_ranks: int = None,
                 local_index: int = None, ep_size: int = 1):
        self.size, self.rank = size, rank
        self.ep_size = ep_size                         # 1, or size: experts split over the ranks (sharding.py)
        self.local_ranks = local_ranks or size         # ranks sharing this host (and its memory)
        self.vocab_size = None                         # the full vocabulary, set by the sharded loader
        on_cuda = str(device).startswith("cuda")
        if on_cuda:
            torch.cuda.set_device(rank % self.local_ranks if local_index is None else local_index)
        dist.init_process_group("nccl" if on_cuda else "gloo", init_method=f"tcp://{init_addr}",
                                rank=rank, world_size=size, timeout=COLLECTIVE_TIMEOUT)
        self.step_group = dist.new_group(backend="gloo", timeout=STEP_CHANNEL_TIMEOUT)
        self.shares_memory = not on_cuda              # CPU ranks of one node share its RAM; GPUs do not
        logger.info("tensor parallel rank %d of %d (%s)", rank, size, dist.get_backend())

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of every rank's x (in place): the output of a row-parallel layer."""
        dist.all_reduce(x)
        return x

    def embed(self, ids: torch.Tensor, shard: torch.Tensor) -> torch.Tensor:
        """ids [T] of the full vocabulary, shard [V/size, H] = rows rank*V/size.. -> embeddings [T, H]."""
        rows = shard.shape[0]
        local = ids - self.rank * rows                                   # [T]
        outside = (local < 0) | (local >= rows)                          # [T]
        x = F.embedding(local.clamp(0, rows - 1), shard)                 # [T, H]
        x.masked_fill_(outside.unsqueeze(1), 0)
        return self.all_reduce(x)

    def gather_logits(self, local: torch.Tensor) -> torch.Tensor:
        """local [N, V/size] of this rank's vocabulary shard -> [N, V] on every rank (padding dropped)."""
        parts = [torch.empty_like(local) for _ in range(self.size)]     # size x [N, V/size]
        dist.all_gather(parts, local.contiguous())
        return torch.cat(parts, dim=1)[:, :self.vocab_size]              # [N, V]

    def broadcast_ints(self, values: torch.Tensor) -> torch.Tensor:
        """values: int64 CPU tensor, rank 0's contents win (same shape on every rank) over the step channel."""
        dist.broadcast(values, src=0, group=self.step_group)
        return values

    def agree_on(self, value: int) -> int:
        """Rank 0's value of an int, on every rank."""
        return int(self.broadcast_ints(torch.tensor([value], dtype=torch.int64))[0])

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
