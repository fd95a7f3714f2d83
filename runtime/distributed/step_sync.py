"""Rank 0 sends each step's plain data; ranks > 0 rebuild the same ForwardBatch and run the same forward.

A step travels as two int64 broadcasts over the step channel: a header [kind, B, T, N, U, S], then
  input_ids [T] | prefix_lens [B] | extend_lens [B] | req rows [B] | out_cache_loc [T] | logits_indices [N]
  | table update rows [U] | starts [U] | lengths [U] | slots [S]
where the updates are the req_to_token segments rank 0 wrote for this step, so every rank's block table
holds the same slots.  A STOP header ends the workers.  While no step has been sent for HEARTBEAT_S, rank 0
sends a PING header: a rank that is gone (on any node) makes it fail, and rank 0 then exits, so the server
ends even when idle.
"""

import logging
import os
import threading
import time

import torch

from radixlm.runtime.runner.forward_batch import ForwardBatch

logger = logging.getLogger(__name__)
STEP, STOP, PING = 1, 2, 3
HEADER_LEN = 6
HEARTBEAT_S = 1.0


class StepLeader:
    """Rank 0's side: send_step after the runner wrote the step's table entries; stop() at the
    end (also ends the heartbeat thread).  One lock orders the broadcasts of the step and heartbeat threads."""

    def __init__(self, tp, heartbeat_s: float = HEARTBEAT_S):
        self.tp, self.lock, self.stopped = tp, threading.Lock(), False
        self.last_sent = time.monotonic()
        threading.Thread(target=self._heartbeat, args=(heartbeat_s,), daemon=True, name="tp-heartbeat").start()

    def send_step(self, fb: ForwardBatch, rows, table: torch.Tensor) -> None:
        """rows: the step's StepRows; the runner wrote each row's table_slots at table_start."""
        updates = [(r.row, r.table_start, table[r.row, r.table_start:r.table_start + len(r.table_slots)])
                   for r in rows if r.table_slots]
        self.send(fb, updates)

    def send(self, fb: ForwardBatch, updates: list) -> None:
        """updates: (row, start, slots [n]) segments of the block table written since the last step."""
        as_long = lambda xs: torch.tensor(xs, dtype=torch.int64)  # noqa: E731
        rows, starts = [u[0] for u in updates], [u[1] for u in updates]
        slots = [u[2].to(torch.int64).cpu() for u in updates]                        # [n] each
        lens = [int(x.shape[0]) for x in slots]
        head = [STEP, fb.batch_size, int(fb.input_ids.shape[0]), int(fb.logits_indices.shape[0]), len(rows),
                sum(lens)]
        payload = torch.cat([fb.input_ids.cpu(), as_long(fb.prefix_lens_list), as_long(fb.extend_lens_list),
                             fb.req_pool_indices.cpu(), fb.out_cache_loc.cpu(), fb.logits_indices.cpu(),
                             as_long(rows), as_long(starts), as_long(lens), *slots])   # [3B + 2T + N + 3U + S]
        self._broadcast(as_long(head), payload)

    def _broadcast(self, head: torch.Tensor, payload: torch.Tensor = None) -> None:
        with self.lock:
            if self.stopped:
                raise RuntimeError("the tensor parallel step channel is stopped")
            self.tp.broadcast_ints(head)
            if payload is not None:
                self.tp.broadcast_ints(payload)
            self.last_sent = time.monotonic()

    def _heartbeat(self, period: float) -> None:
        while not self.stopped:
            time.sleep(period)
            if self.stopped or time.monotonic() - self.last_sent < period:
                continue
            try:
                self._broadcast(_header(PING))
            except Exception as exc:    # noqa: BLE001 - whatever gloo raises for a lost peer
                if not self.stopped:
                    logger.error("a tensor parallel rank is gone (%s); exiting", exc)
                    logging.shutdown()
                    os._exit(1)

    def stop(self) -> None:
        """Sends STOP once; safe to call again, and when a worker is already gone."""
        try:
            self._broadcast(_header(STOP))
        except RuntimeError:
            pass
        with self.lock:
            self.stopped = True


def _header(kind: int) -> torch.Tensor:
    return torch.tensor([kind] + [0] * (HEADER_LEN - 1), dtype=torch.int64)     # [HEADER_LEN]


def receive_step(tp, table: torch.Tensor, device):
    """A worker's next ForwardBatch (its table updated first), or None on STOP."""
    head = [PING]
    while head[0] == PING:
        head = tp.broadcast_ints(torch.zeros(HEADER_LEN, dtype=torch.int64)).tolist()
    if head[0] == STOP:
        return None
    _, b, t, n, u, s = head
    payload = tp.broadcast_ints(torch.zeros(3 * b + 2 * t + n + 3 * u + s, dtype=torch.int64))
    sizes = [t, b, b, b, t, n, u, u, u, s]
    ids, prefix, extend, reqs, out_loc, logits_idx, rows, starts, lens, slots = torch.split(payload, sizes)
    at = 0
    for row, start, length in zip(rows.tolist(), starts.tolist(), lens.tolist()):
        table[row, start:start + length] = slots[at:at + length].to(table.dtype)
        at += length
    return ForwardBatch.build(ids.tolist(), prefix.tolist(), extend.tolist(), reqs.tolist(), out_loc.tolist(),
                              table, logits_idx.tolist(), device)


def run_worker_steps(runner) -> int:
    """The loop of a rank > 0: replay rank 0's steps until STOP (0) or until a peer is lost (1)."""
    table = runner.req_to_token.table
    steps = 0
    try:
        with torch.inference_mode():
            while True:
                fb = receive_step(runner.tp, table, runner.device)
                if fb is None:
                    logger.info("stop after %d steps", steps)
                    return 0
                hidden = runner.model.forward(fb)                               # [T, H]
                runner.model.compute_logits(hidden[fb.logits_indices])          # [N, V], rank 0 samples
                steps += 1
    except RuntimeError as exc:
        logger.error("tensor parallel peer lost after %d steps: %s", steps, exc)
        return 1
