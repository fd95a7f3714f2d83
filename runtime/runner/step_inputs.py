"""Host-to-device transfer of a step's integer inputs.

On CUDA every list of a step goes into one pinned host buffer and crosses in one asynchronous copy,
instead of one pageable, synchronous copy per list.  On the CPU each list becomes its tensor
directly, as before: no staging, no extra copy.
"""

import array

import torch


def plain_tensors(lists: list, device) -> list:
    """One int64 tensor per list on `device`, each made directly (no staging)."""
    if torch.device(device).type != "cpu":
        return [torch.tensor(xs, dtype=torch.int64, device=device) for xs in lists]  # [len(xs)] each
    return [int64_tensor(xs) for xs in lists]


def int64_tensor(xs) -> torch.Tensor:
    """A CPU int64 tensor of a list of ints, over an array.array's memory: a fourth of torch.tensor(list)'s
    time at a few hundred ints (it converts each element through Python)."""
    if not len(xs):
        return torch.empty(0, dtype=torch.int64)                         # [0]
    return torch.frombuffer(array.array("q", xs), dtype=torch.int64)    # [len(xs)]


class StepInputStager:
    """to_device(lists) -> one int64 tensor per list, on `device`.

    CUDA: the lists are packed into a pinned buffer (grown on demand, never shrunk) and copied with
    non_blocking=True; the buffer is reused only after the copy that last read it has finished (an
    event per buffer, RING buffers in turn).  A copy queues behind the device work launched before it,
    so with overlap scheduling a step's copies wait for the step still running: the ring is long enough
    that building the next step never waits for them.
    """

    RING = 16

    def __init__(self, device):
        self.device = torch.device(device)
        self.staged = self.device.type == "cuda"
        self._buffers = [None] * self.RING   # pinned int64 host buffers, [capacity] each
        self._views = [None] * self.RING     # their numpy views (a list is written in one assignment)
        self._events = [None] * self.RING
        self._turn = 0

    def to_device(self, lists: list) -> list:
        if not self.staged:
            return plain_tensors(lists, self.device)
        total = sum(len(xs) for xs in lists)
        host, view = self._host_buffer(total)  # [capacity] pinned, and its numpy view
        at = 0
        for xs in lists:
            view[at:at + len(xs)] = xs
            at += len(xs)
        flat = host[:total].to(self.device, non_blocking=True)  # [total] on the device
        self._events[self._turn] = torch.cuda.Event()
        self._events[self._turn].record()
        self._turn = (self._turn + 1) % self.RING
        out, at = [], 0
        for xs in lists:
            out.append(flat[at:at + len(xs)])  # [len(xs)] view
            at += len(xs)
        return out

    def _host_buffer(self, n: int):
        """The current turn's pinned buffer, at least n long, once the copy that last read it is done,
        with its numpy view."""
        turn = self._turn
        if self._events[turn] is not None:
            self._events[turn].synchronize()
        buf = self._buffers[turn]
        if buf is None or buf.numel() < n:
            buf = torch.empty(max(n, 4096), dtype=torch.int64, device="cpu", pin_memory=True)  # [capacity]
            self._buffers[turn], self._views[turn] = buf, buf.numpy()
        return buf, self._views[turn]
