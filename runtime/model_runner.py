"""ModelRunner: turns a StepPlan into tensors, runs the model, samples, computes logprobs.

The only part of the scheduler process that touches torch.  Owns the model, the KV pool and the
req_to_token table; the scheduler owns which slots each request uses (req.kv_slots).
"""

import logging
import time
from typing import Optional

import torch

from radixlm.runtime.forward_batch import ForwardBatch
from radixlm.runtime.kv_blocks import kv_identity, read_blocks, write_blocks
from radixlm.runtime.memory_pool import KVPool, ReqToTokenPool
from radixlm.runtime.model_setup import build_model, kv_budget
from radixlm.runtime.scheduler.plan import EntryResult
from radixlm.runtime.sampler import SamplingInputs, apply_grammar_bitmask, compute_logprobs, sample

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model_path: str, dtype: str = "float32", max_total_tokens: Optional[int] = None,
                 mem_fraction: float = 0.2, num_rows: int = 264, attention_backend: str = "auto",
                 context_length: Optional[int] = None, device: Optional[str] = None, deterministic: bool = False):
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model_path = model_path
        torch.set_grad_enabled(False)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model, self.config, self.kv_pool = build_model(
            model_path, self.dtype, self.device, attention_backend,
            lambda cfg: kv_budget(cfg, self.dtype, max_total_tokens, mem_fraction, self.device), deterministic)
        self.num_slots = self.kv_pool.num_slots
        self.context_len = min(context_length or self.config.context_length, self.config.context_length)
        self.vocab_size = self.config.vocab_size
        self.eos_token_ids = set(self.config.eos_token_ids)
        self.num_rows = num_rows
        self.last_mask_seconds: Optional[float] = None   # see forward_step
        self.req_to_token = ReqToTokenPool(num_rows, self.context_len + 1, self.device)
        logger.info("KV cache: %d tokens (%.1f MiB, %s), context length %d", self.num_slots,
                    self.num_slots * KVPool.bytes_per_token(self.config.num_layers, self.config.num_kv_heads,
                                                            self.config.head_dim, self.dtype) / 2**20,
                    str(self.dtype).replace("torch.", ""), self.context_len)

    @property
    def kv_bytes_per_token(self) -> int:
        return KVPool.bytes_per_token(self.config.num_layers, self.config.num_kv_heads, self.config.head_dim,
                                      self.dtype)

    def kv_identity(self, block_size: int) -> dict:
        """What must match before this runner may load KV blocks another server wrote."""
        return kv_identity(self.model_path, self.config, self.dtype, block_size)

    def read_kv(self, slots: list, block_size: int) -> list:
        """KV of whole blocks of slots, one contiguous bytes-like payload per block (disk tier)."""
        return read_blocks(self.kv_pool, slots, block_size)

    def write_kv(self, slots: list, payloads: list) -> None:
        write_blocks(self.kv_pool, slots, payloads)

    def forward_step(self, plan) -> list:
        """Run every entry of the plan; returns one EntryResult per entry, in order.

        Sets `last_mask_seconds`: the wall time this step spent filling and applying grammar masks
        (host time: on CUDA the copy and the masked fill are only launched), None when no sampled
        row was constrained."""
        self.last_mask_seconds = None
        with torch.inference_mode():
            fb, sample_rows, logprob_rows = self._build_batch(plan.entries)
            hidden = self.model.forward(fb)                          # [T, hidden]
            logits = self.model.compute_logits(hidden[fb.logits_indices])  # [N, V] float32
            return self._sample(plan.entries, logits, sample_rows, logprob_rows)

    def _build_batch(self, entries):
        table = self.req_to_token.table
        input_ids, out_loc, logits_idx = [], [], []
        sample_rows, logprob_rows = {}, {}
        offset = 0
        for i, e in enumerate(entries):
            req, end = e.req, e.prefix_len + e.extend_len
            if req.table_len < end:
                table[req.row, req.table_len:end] = torch.tensor(req.kv_slots[req.table_len:end], dtype=torch.int32)
                req.table_len = end
            input_ids.extend(req.fill_ids[e.prefix_len:end])
            out_loc.extend(req.kv_slots[e.prefix_len:end])
            if e.logprob_positions:
                logprob_rows[i] = len(logits_idx)
                logits_idx.extend(offset + q - e.prefix_len for q in e.logprob_positions)
            if e.sample:
                sample_rows[i] = len(logits_idx)
                logits_idx.append(offset + e.extend_len - 1)
            offset += e.extend_len
        fb = ForwardBatch.build(input_ids, [e.prefix_len for e in entries], [e.extend_len for e in entries],
                                [e.req.row for e in entries], out_loc, table, logits_idx, self.device)
        return fb, sample_rows, logprob_rows

    def _sample(self, entries, logits, sample_rows, logprob_rows) -> list:
        results = [EntryResult() for _ in entries]
        if sample_rows:
            idx = list(sample_rows.keys())
            reqs = [entries[i].req for i in idx]
            rows = torch.tensor([sample_rows[i] for i in idx], dtype=torch.long, device=logits.device)
            sample_logits = logits[rows]                                          # [B, V]
            inputs = SamplingInputs.prepare([r.sampling_params for r in reqs], [r.origin_input_ids for r in reqs],
                                            [r.output_ids for r in reqs], self.eos_token_ids, self.vocab_size,
                                            device=logits.device)
            next_ids = sample(self._apply_grammar_masks(reqs, sample_logits), inputs).tolist()
            for j, i in enumerate(idx):
                results[i].next_token = int(next_ids[j])
            want = [j for j, r in enumerate(reqs) if r.return_logprob]
            if want:
                lp, top = compute_logprobs(sample_logits[want], torch.tensor([next_ids[j] for j in want]),
                                           max(reqs[j].top_logprobs_num for j in want))
                for k, j in enumerate(want):
                    results[idx[j]].output_logprob = lp[k]
                    results[idx[j]].output_top = top[k][:reqs[j].top_logprobs_num] if reqs[j].top_logprobs_num else None
        for i, start in logprob_rows.items():
            e = entries[i]
            n = len(e.logprob_positions)
            targets = [e.req.fill_ids[q + 1] for q in e.logprob_positions]
            lp, top = compute_logprobs(logits[start:start + n], torch.tensor(targets), e.req.top_logprobs_num)
            results[i].input_logprobs = [[lp[k], targets[k], top[k] if e.req.top_logprobs_num else None]
                                         for k in range(n)]
        return results

    def _apply_grammar_masks(self, reqs, logits):
        """logits [B, V] -> a copy with -inf where a request's grammar forbids the token, or `logits`
        itself when no request is constrained (`logits` stays unmasked for the logprobs).

        Masking before sample()'s logit bias and penalties equals masking between them, where the
        sampler's contract places it: those are finite and keep -inf at -inf. Timed into
        last_mask_seconds."""
        rows = [b for b, r in enumerate(reqs) if getattr(r, "grammar", None) is not None]
        if not rows:
            return logits
        started = time.perf_counter()
        bitmask = torch.empty((len(reqs), (self.vocab_size + 31) // 32), dtype=torch.int32)  # [B, W]
        for b in rows:  # free rows stay unfilled: apply_grammar_bitmask never reads them
            reqs[b].grammar.fill_bitmask(bitmask, b)
        masked = apply_grammar_bitmask(logits, bitmask, rows, self.vocab_size)      # [B, V]
        self.last_mask_seconds = time.perf_counter() - started
        return masked


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype in ("float32", "fp32"):
        return torch.float32
    if dtype in ("bfloat16", "bf16"):
        return torch.bfloat16
    if dtype in ("float16", "fp16", "half"):
        return torch.float16
    if dtype == "auto":
        if device == "cuda" or _cpu_has_bf16():
            return torch.bfloat16
        return torch.float32
    raise ValueError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")


def _cpu_has_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags
