"""Pure decode steps through static, padded input buffers: replayed as CUDA graphs on CUDA, run
eagerly elsewhere (the same buffers and padding, so CPU tests prove what the graphs compute).

A decode step of B requests runs at the smallest captured batch size bs >= B.  Rows B..bs are
padding: token 0 at position 0 of a scratch request row that no request owns, whose only KV slot
is a scratch slot that the allocator never hands out.  Padding rows therefore write only the
scratch slot, read only it, and their logits are dropped.  Attention metadata (seq lens, rows, out
slots, positions) lives in the static buffers, which the kernels read on the device at replay.
"""

import logging

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

logger = logging.getLogger(__name__)
DEFAULT_MAX_BS = 64


def capture_sizes(max_bs: int) -> list:
    """Batch sizes captured: 1, 2, 4, 8, then multiples of 16 up to max_bs (max_bs itself too)."""
    if max_bs < 1:
        raise ValueError(f"cuda_graph_max_bs must be at least 1, not {max_bs}")
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 16))
    return sorted(set(sizes + [max_bs]))


class PaddedDecode:
    """run(fb) -> logits [B, V] float32 for a pure decode ForwardBatch of B <= max_bs requests.

    model: has forward(fb) -> [T, H] and compute_logits([N, H]) -> [N, V]; req_to_token: the runner's
    table [R, C]; scratch_row / scratch_slot: a table row and a KV slot owned by no request.
    capture=True (CUDA only) records one graph per size; otherwise every step runs eagerly on the
    padded buffers.  Not thread-safe: the static buffers hold one step at a time.
    """

    def __init__(self, model, req_to_token: torch.Tensor, scratch_row: int, scratch_slot: int, max_bs: int,
                 capture: bool):
        device = req_to_token.device
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {device}")
        self.model, self.req_to_token = model, req_to_token
        self.scratch_row, self.scratch_slot = scratch_row, scratch_slot
        self.sizes = capture_sizes(max_bs)
        self.max_bs = self.sizes[-1]
        req_to_token[scratch_row, 0] = scratch_slot
        n = self.max_bs
        long = dict(dtype=torch.int64, device=device)
        # rows: input ids, positions, out slots, req rows, seq lens, prefix lens; a padding row's values
        pad = torch.tensor([0, 0, scratch_slot, scratch_row, 1, 0], **long)  # [6]
        self.padding = pad[:, None].expand(6, n).contiguous()  # [6, max_bs] every row padding
        self.inputs = self.padding.clone()                      # [6, max_bs] what the graphs read
        (self.input_ids, self.positions, self.out_cache_loc, self.req_pool_indices, self.seq_lens,
         self.prefix_lens) = self.inputs.unbind(0)              # [max_bs] views each
        self.extend_lens = torch.ones(n, **long)                # [max_bs]
        self.rows = torch.arange(n, **long)                     # [max_bs]: logits indices and extend starts
        self.graphs, self.logits = {}, {}                # bs -> CUDAGraph, its static logits [bs, V]
        if capture:
            self._capture_all()

    def padded_size(self, batch_size: int):
        """The captured size a batch of batch_size runs at, or None when it is too large."""
        return next((s for s in self.sizes if s >= batch_size), None)

    def can_run(self, fb: ForwardBatch) -> bool:
        return fb.is_decode and self.padded_size(fb.batch_size) is not None

    def run(self, fb: ForwardBatch) -> torch.Tensor:
        b = fb.batch_size
        bs = self.padded_size(b)
        self._load(fb, b)
        if bs in self.graphs:
            self.graphs[bs].replay()
            return self.logits[bs][:b]          # [B, V]
        return self._forward(bs)[:b]            # [B, V]

    def _load(self, fb: ForwardBatch, b: int) -> None:
        """The step's rows into the static buffers, the rows after them back to padding (three launches)."""
        step = torch.stack((fb.input_ids, fb.positions, fb.out_cache_loc, fb.req_pool_indices, fb.seq_lens,
                            fb.prefix_lens))  # [6, B]
        self.inputs[:, :b].copy_(step)
        self.inputs[:, b:].copy_(self.padding[:, b:])

    def _static_batch(self, bs: int) -> ForwardBatch:
        return ForwardBatch(
            input_ids=self.input_ids[:bs], positions=self.positions[:bs], out_cache_loc=self.out_cache_loc[:bs],
            req_pool_indices=self.req_pool_indices[:bs], prefix_lens=self.prefix_lens[:bs],
            extend_lens=self.extend_lens[:bs], seq_lens=self.seq_lens[:bs], req_to_token=self.req_to_token,
            logits_indices=self.rows[:bs], prefix_lens_list=[0] * bs, extend_lens_list=[1] * bs,
            extend_start=self.rows[:bs], max_extend_len=1)

    def _forward(self, bs: int) -> torch.Tensor:
        hidden = self.model.forward(self._static_batch(bs))   # [bs, H]
        return self.model.compute_logits(hidden)              # [bs, V] float32

    def _capture_all(self) -> None:
        """One graph per size, largest first, sharing one memory pool; each size runs eagerly once first
        (Triton compiles its kernels there, outside the capture)."""
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            for bs in reversed(self.sizes):
                self._load_padding()
                for _ in range(2):
                    self._forward(bs)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self.logits[bs] = self._forward(bs)
                self.graphs[bs] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        logger.info("CUDA graphs captured for decode batch sizes %s", self.sizes)

    def _load_padding(self) -> None:
        """Every static row a padding row (what a capture runs on)."""
        self.inputs.copy_(self.padding)
