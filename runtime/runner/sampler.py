"""Batched sampler, in two phases (STYLE habit 8).

1. `SamplingInputs.prepare(...)` (CPU side, plain Python in, small tensors out) turns per-request
   `SamplingParams` and token histories into per-row tensors and sparse (row, col, value) entries.
2. `sample(logits, inputs, vocab_mask)` is tensor-only. Per row, in this order:
   logit_bias (+=); repetition_penalty over prompt+output tokens (HF: x > 0 -> x / p, else x * p);
   frequency/presence penalties over output tokens (x -= freq * count + presence);
   vocab_mask (False -> -inf); min_new_tokens blocking (eos ids and stop_token_ids -> -inf while
   fewer than min_new_tokens tokens were generated, unless that would leave no token allowed,
   in which case the grammar's mask wins); then greedy rows take the argmax and sampled rows
   draw from softmax(x / T) filtered by top_k, then top_p (on the renormalised top-k
   distribution), then min_p.
   A temperature below GREEDY_TEMPERATURE is greedy, and sampled rows divide logits minus their row
   maximum, so no temperature overflows into inf/NaN.  A row whose logits hold a NaN gets token
   NAN_TOKEN (-1): the caller fails that request instead of emitting a token.
   Rows are independent: a row's token depends only on its own logits, inputs and randomness.
   A seeded row draws with its own generator seeded from (seed, output length), so it is
   reproducible whatever else is in the batch. A row with no allowed token returns an
   unspecified id.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from radixlm.runtime.sampling_params import SamplingParams

_MASK64 = (1 << 64) - 1
GREEDY_TEMPERATURE = 1e-5    # below this, sampling is argmax (as SGLang treats temperature ~ 0)
NAN_TOKEN = -1               # sample()'s answer for a row whose logits contain NaN


class Entries(NamedTuple):
    """Sparse per-row entries: logits[rows[i], cols[i]] is touched with vals[i]."""

    rows: Tensor  # [K] int64
    cols: Tensor  # [K] int64
    vals: Tensor  # [K] float32


def _step_seed(seed: int, step: int) -> int:
    """splitmix64 of (seed, step): a generator seed per request and decode step."""
    z = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) & ((1 << 63) - 1)


@dataclass
class SamplingInputs:
    """Everything `sample` needs for one batch of B rows, already on the logits' device."""

    temperatures: Tensor  # [B, 1] float32; 1.0 on greedy rows
    top_ps: Tensor  # [B] float32
    top_ks: Tensor  # [B] int64; vocab_size when off
    min_ps: Tensor  # [B] float32
    greedy: Tensor  # [B] bool
    seeded: list[tuple[int, int]]  # (row, generator seed for this step), sampled rows only
    logit_bias: Entries | None
    repetition: Entries | None  # vals = repetition_penalty
    additive: Entries | None  # vals = frequency_penalty * count + presence_penalty
    blocked: Entries | None  # vals unused
    all_greedy: bool
    need_top_k: bool
    need_top_p: bool
    need_min_p: bool

    @property
    def needs_logit_processing(self) -> bool:
        return any(e is not None for e in (self.logit_bias, self.repetition,
                                           self.additive, self.blocked))

    @classmethod
    def prepare(cls, params: list[SamplingParams], prompt_ids: list[list[int]],
                output_ids: list[list[int]], eos_token_ids: set[int], vocab_size: int,
                device="cpu", dense: Tensor | None = None) -> "SamplingInputs":
        """Build the batch's inputs. Row b uses params[b], prompt_ids[b] and output_ids[b] (the
        tokens generated so far). Token ids outside [0, vocab_size) are ignored.  dense: the rows'
        [5, B] values already on the device (RowSamplingTable.gather); else they are made here."""
        B, V = len(params), vocab_size
        assert len(prompt_ids) == B and len(output_ids) == B
        greedy = [p.is_greedy or p.temperature < GREEDY_TEMPERATURE for p in params]
        top_ks = [V if p.top_k < 0 else min(p.top_k, V) for p in params]
        bias, rep, add, blk = _Acc(V), _Acc(V), _Acc(V), _Acc(V)
        seeded = []
        for b, p in enumerate(params):
            out = output_ids[b]
            if not greedy[b] and p.seed is not None:
                seeded.append((b, _step_seed(p.seed, len(out))))
            if p.logit_bias:
                bias.add(b, list(p.logit_bias), list(p.logit_bias.values()))
            if p.repetition_penalty != 1.0:
                rep.add(b, np.unique(_ids(prompt_ids[b], out)), p.repetition_penalty)
            if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
                ids, counts = np.unique(_ids(out), return_counts=True)  # [U], [U]
                add.add(b, ids, np.float32(p.frequency_penalty) * counts.astype(np.float32)
                        + np.float32(p.presence_penalty))
            if len(out) < p.min_new_tokens:
                blk.add(b, sorted(set(eos_token_ids).union(p.stop_token_ids or [])), 0.0)
        sampled = [p for p, g in zip(params, greedy) if not g]
        if dense is None:
            # one host array, one asynchronous copy: a blocking copy would wait for the step still running
            host = np.array([_dense_values(p, V) for p in params], dtype=np.float32).T   # [5, B]
            dense = torch.from_numpy(np.ascontiguousarray(host)).to(device, non_blocking=True)  # [5, B]
        dev = dense
        return cls(
            temperatures=dev[0].view(B, 1), top_ps=dev[1], top_ks=dev[2].to(torch.int64), min_ps=dev[3],
            greedy=dev[4] > 0.5,
            seeded=seeded,
            logit_bias=bias.build(device), repetition=rep.build(device),
            additive=add.build(device), blocked=blk.build(device),
            all_greedy=all(greedy),
            need_top_k=any(k < V for k, g in zip(top_ks, greedy) if not g),
            need_top_p=any(p.top_p < 1.0 for p in sampled),
            need_min_p=any(p.min_p > 0.0 for p in sampled),
        )

    @classmethod
    def greedy_only(cls) -> "SamplingInputs":
        """A batch whose rows are all greedy with nothing to add to their logits: sample() takes the argmax
        and reads no tensor of these inputs, so none is made."""
        return cls(temperatures=None, top_ps=None, top_ks=None, min_ps=None, greedy=None, seeded=[],
                   logit_bias=None, repetition=None, additive=None, blocked=None, all_greedy=True,
                   need_top_k=False, need_top_p=False, need_min_p=False)

    @staticmethod
    def plain_greedy(params: list, output_lens) -> bool:
        """Every row greedy, with no logit bias, penalty or min_new_tokens still blocking (see greedy_only)."""
        return all((p.is_greedy or p.temperature < GREEDY_TEMPERATURE) and not p.logit_bias
                   and p.repetition_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0
                   and n >= p.min_new_tokens for p, n in zip(params, output_lens))


def _dense_values(p: SamplingParams, vocab_size: int) -> tuple:
    """(temperature, top_p, top_k, min_p, greedy) of one row as floats: what RowSamplingTable keeps."""
    greedy = p.is_greedy or p.temperature < GREEDY_TEMPERATURE
    top_k = vocab_size if p.top_k < 0 else min(p.top_k, vocab_size)
    return (1.0 if greedy else p.temperature, p.top_p, top_k, p.min_p, float(greedy))


class RowSamplingTable:
    """The dense sampling values of the request on each req_to_token row, kept on the device [5, R]: a row
    is written when a request's SamplingParams first reach it (a request joins, or takes over a row a
    finished one left), and each step gathers its rows instead of sending every row's values again."""

    def __init__(self, num_rows: int, vocab_size: int, device):
        self.vocab_size = vocab_size
        self.values = torch.zeros((5, num_rows), dtype=torch.float32, device=device)  # [5, R]
        self.owner: list = [None] * num_rows     # the SamplingParams each row holds (kept alive: `is` is safe)

    def gather(self, rows: list, params: list, rows_t: Tensor) -> Tensor:
        """rows [B] (host ints) and rows_t (the same on the device) -> [5, B] values of those rows."""
        new = [(r, p) for r, p in zip(rows, params) if self.owner[r] is not p]
        if new:
            host = np.array([_dense_values(p, self.vocab_size) for _, p in new], dtype=np.float32).T  # [5, C]
            cols = torch.from_numpy(np.array([r for r, _ in new], dtype=np.int64)).to(
                self.values.device, non_blocking=True)                                                # [C]
            self.values[:, cols] = torch.from_numpy(np.ascontiguousarray(host)).to(self.values.device,
                                                                                   non_blocking=True)
            for r, p in new:
                self.owner[r] = p
        return self.values[:, rows_t]    # [5, B]


def _ids(*parts) -> np.ndarray:
    return np.fromiter(chain(*parts), dtype=np.int64)  # [L]


class _Acc:
    """Collects sparse entries row by row on the host (numpy); drops token ids outside [0, V); build()
    moves each field to the target device in one copy."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []

    def add(self, row: int, toks, vals) -> None:
        toks = np.asarray(toks, dtype=np.int64).reshape(-1)  # [K]
        vals = np.broadcast_to(np.asarray(vals, dtype=np.float32), toks.shape)  # [K]
        keep = (toks >= 0) & (toks < self.vocab_size)  # [K]
        self.rows.append(np.full(int(keep.sum()), row, dtype=np.int64))
        self.cols.append(toks[keep])
        self.vals.append(vals[keep])

    def build(self, device) -> Entries | None:
        if not self.rows or sum(r.size for r in self.rows) == 0:
            return None
        return Entries(*(torch.from_numpy(np.concatenate(t)).to(device, non_blocking=True)  # [K] each
                         for t in (self.rows, self.cols, self.vals)))


def apply_logit_processing(logits: Tensor, inputs: SamplingInputs,
                           vocab_mask: Tensor | None = None) -> Tensor:
    """Step 1 of `sample` (bias, penalties, vocab mask, min_new_tokens), in place on a float
    tensor; returns it."""
    if (e := inputs.logit_bias) is not None:
        logits[e.rows, e.cols] += e.vals
    if (e := inputs.repetition) is not None:
        x = logits[e.rows, e.cols]  # [K]
        logits[e.rows, e.cols] = torch.where(x > 0, x / e.vals, x * e.vals)
    if (e := inputs.additive) is not None:
        logits[e.rows, e.cols] -= e.vals
    if vocab_mask is not None:
        logits.masked_fill_(~vocab_mask, float("-inf"))
    if (e := inputs.blocked) is not None:
        saved = logits[e.rows, e.cols]  # [K]
        logits[e.rows, e.cols] = float("-inf")
        dead = ~torch.isfinite(logits).any(dim=-1)  # [B]: blocking left nothing allowed
        logits[e.rows, e.cols] = torch.where(dead[e.rows], saved, float("-inf"))
    return logits


def _filter_probs(probs: Tensor, inputs: SamplingInputs) -> Tensor:
    """Zero the tokens that top_k, top_p and min_p drop; probs [B, V] -> unnormalised [B, V]."""
    if inputs.need_top_k or inputs.need_top_p:
        sorted_p, idx = probs.sort(dim=-1, descending=True)  # [B, V]
        ranks = torch.arange(probs.shape[-1], device=probs.device)  # [V]
        sorted_p = sorted_p.masked_fill(ranks[None, :] >= inputs.top_ks[:, None], 0.0)
        if inputs.need_top_p:
            cum = sorted_p.cumsum(dim=-1)  # [B, V]
            mass = cum[:, -1:]  # [B, 1] mass kept by top_k
            before = cum - sorted_p  # [B, V] mass of the higher-ranked tokens
            drop = (before >= inputs.top_ps[:, None] * mass) & (inputs.top_ps[:, None] < 1.0)
            drop[:, 0] = False  # always keep the top token
            sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
    if inputs.need_min_p:
        top = probs.max(dim=-1, keepdim=True).values  # [B, 1]
        probs = probs.masked_fill(probs < inputs.min_ps[:, None] * top, 0.0)
    return probs


def _draw(probs: Tensor, seeded: list[tuple[int, int]]) -> Tensor:
    """Exponential race: argmax(p / E), E ~ Exp(1) iid, draws index i with probability
    p_i / sum(p). Seeded rows get their noise from their own generator."""
    noise = torch.empty_like(probs).exponential_()  # [B, V]
    for row, seed in seeded:
        gen = torch.Generator(device=probs.device)
        gen.manual_seed(seed)
        noise[row].exponential_(generator=gen)
    noise.clamp_(min=torch.finfo(noise.dtype).tiny)  # p == 0 must never win
    return (probs / noise).argmax(dim=-1)


def sample(logits: Tensor, inputs: SamplingInputs, vocab_mask: Tensor | None = None) -> Tensor:
    """logits [B, V] float, vocab_mask [B, V] bool (True = allowed) -> token ids [B] int64;
    NAN_TOKEN where a row of `logits` holds a NaN.  Does not modify `logits`."""
    # max and amax propagate NaN, so a row holding one has a NaN maximum: one reduction instead of isnan + any
    # (at 64 x 49,152 on CPU: max with its indices 0.95 ms, argmax 2.3 ms, isnan().any() 2.3 ms)
    if inputs.all_greedy and vocab_mask is None and not inputs.needs_logit_processing:
        top, ids = logits.max(dim=-1)  # [B] each; the first maximal index, as argmax gives
        return torch.where(torch.isnan(top), NAN_TOKEN, ids)
    nan_rows = torch.isnan(logits.amax(dim=-1))  # [B]
    return torch.where(nan_rows, NAN_TOKEN, _sample(logits, inputs, vocab_mask))


def _sample(logits: Tensor, inputs: SamplingInputs, vocab_mask: Tensor | None) -> Tensor:
    x = apply_logit_processing(logits.to(torch.float32, copy=True), inputs, vocab_mask)  # [B, V]
    top, greedy_ids = x.max(dim=-1, keepdim=True)  # [B, 1] each
    greedy_ids = greedy_ids.view(-1)  # [B]
    if inputs.all_greedy:
        return greedy_ids
    shifted = (x - top.clamp(min=torch.finfo(x.dtype).min)) / inputs.temperatures  # [B, V], max 0
    probs = torch.softmax(shifted, dim=-1)  # [B, V]
    probs = _filter_probs(probs, inputs)
    sampled_ids = _draw(probs, inputs.seeded)  # [B]
    return torch.where(inputs.greedy, greedy_ids, sampled_ids)


def compute_logprobs(logits: Tensor, token_ids, top_k: int
                     ) -> tuple[list[float], list[list[tuple[float, int]]]]:
    """Log-probabilities under log_softmax of the raw logits [N, V] (no temperature, no
    penalties): the logprob of token_ids[i] (a list or tensor of N ids, moved to the logits'
    device), and the top_k (logprob, token id) alternatives per row sorted by descending logprob
    (empty lists when top_k == 0)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [N, V]
    # [N, 1]; NAN_TOKEN rows score NaN
    ids = torch.as_tensor(token_ids, dtype=torch.int64, device=logits.device).view(-1, 1)
    picked = logp.gather(1, ids.clamp(min=0)).view(-1)  # [N]
    chosen = torch.where(ids.view(-1) < 0, float("nan"), picked).tolist()  # [N]
    if top_k <= 0:
        return chosen, [[] for _ in chosen]
    vals, idx = logp.topk(min(top_k, logp.shape[-1]), dim=-1)  # [N, k]
    top = [list(zip(v, i)) for v, i in zip(vals.tolist(), idx.tolist())]
    return chosen, top


def apply_grammar_bitmask(logits: Tensor, bitmask: Tensor, rows: list[int], vocab_size: int) -> Tensor:
    """logits [B, V] -> a copy where, on each row b in `rows`, token t gets -inf unless bit t of
    bitmask[b] (int32 [B, ceil(V / 32)], 32 tokens per word, low bit first: xgrammar's layout) is
    set; other rows are copied unchanged and their bitmask rows never read. xgrammar's own kernel."""
    from xgrammar import apply_token_bitmask_inplace

    masked = logits.clone()                                                        # [B, V]
    apply_token_bitmask_inplace(masked, bitmask.to(logits.device, non_blocking=True), vocab_size=vocab_size,
                                indices=list(rows))
    return masked
