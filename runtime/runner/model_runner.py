"""ModelRunner: turns a StepPlan into tensors, runs the model, samples, computes logprobs.

The only part of the scheduler process that touches torch.  Owns the model, the KV pool and the
req_to_token table; the scheduler owns which slots each request uses (req.kv_slots).
"""

import logging
import time
from typing import Optional

import torch

from radixlm.runtime.runner.cuda_graph import DEFAULT_MAX_BS, PaddedDecode
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.kv_blocks import kv_identity, payload_checksum, read_blocks, write_blocks
from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool
from radixlm.runtime.runner.model_setup import WARMUP_TOKENS, build_model, kv_budget, resize_after_warm_up
from radixlm.runtime.runner.sampler import SamplingInputs, apply_grammar_bitmask, compute_logprobs, sample
from radixlm.runtime.runner.step_inputs import StepInputStager
from radixlm.runtime.step import EntryResult

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model_path: str, dtype: str = "float32", max_total_tokens: Optional[int] = None,
                 mem_fraction: float = 0.2, num_rows: int = 264, attention_backend: str = "auto",
                 context_length: Optional[int] = None, device: Optional[str] = None, deterministic: bool = False,
                 disable_cuda_graph: bool = False, cuda_graph_max_bs: int = DEFAULT_MAX_BS,
                 tp: Optional[dict] = None):
        """tp: this rank's place in a --tp-size group (distributed.topology.TPTopology.rank_config); rank 0 then
        broadcasts every step to the other ranks (distributed/step_sync.py).  With tp, the KV pool is sized
        from the budget alone and CUDA graphs are off: a warm-up forward or a padded step on rank 0 alone
        would not match the other ranks' collectives."""
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.pin_host = torch.device(self.device).type == "cuda"   # host staging buffers pinned (async copies)
        self.stager = StepInputStager(self.device)
        self.model_path = model_path
        torch.set_grad_enabled(False)
        self.dtype = resolve_dtype(dtype, self.device)
        self.tp = self.tp_leader = None
        if tp is not None:
            from radixlm.runtime.distributed.group import TensorParallel
            self.tp = TensorParallel(**tp, device=self.device)
        # CUDA: size the KV pool after a warm-up forward
        after_warm_up = self.pin_host and not max_total_tokens and self.tp is None
        budget = ((lambda cfg: WARMUP_TOKENS) if after_warm_up
                  else (lambda cfg: kv_budget(cfg, self.dtype, max_total_tokens, mem_fraction, self.device) + 1))
        self.model, self.config, self.kv_pool = build_model(
            model_path, self.dtype, self.device, attention_backend, budget, deterministic, self.tp)
        if self.tp is not None and self.tp.is_leader:
            from radixlm.runtime.distributed.step_sync import StepLeader
            self.tp_leader = StepLeader(self.tp)
        self.context_len = min(context_length or self.config.context_length, self.config.context_length)
        self.vocab_size = self.config.vocab_size
        self.eos_token_ids = set(self.config.eos_token_ids)
        self.num_rows = num_rows
        self.last_mask_seconds: Optional[float] = None   # see forward_step
        self.req_to_token = ReqToTokenPool(num_rows + 1, self.context_len + 1, self.device)  # + padding's scratch row
        if after_warm_up:
            resize_after_warm_up(self.model, self.kv_pool, self.req_to_token.table, lambda free: kv_budget(
                self.config, self.dtype, None, mem_fraction, self.device, free), self.device)
        self.num_slots = self.kv_pool.num_slots - 1   # the last slot is padding's scratch (cuda_graph.py)
        self.decode_graphs: Optional[PaddedDecode] = None
        if self.pin_host and not disable_cuda_graph and self.tp is None:
            if getattr(self.model.attn_backend, "name", None) == "triton":
                self.use_padded_decode(cuda_graph_max_bs, capture=True)
            else:   # the torch reference reads lengths back to the host: it cannot be captured
                logger.info("CUDA graphs off: they need the triton attention backend")
        logger.info("KV cache: %d tokens (%.1f MiB, %s), context length %d", self.num_slots,
                    self.num_slots * KVPool.bytes_per_token(self.config.num_layers, self.config.num_kv_heads,
                                                            self.config.head_dim, self.dtype) / 2**20,
                    str(self.dtype).replace("torch.", ""), self.context_len)

    def use_padded_decode(self, max_bs: int, capture: bool) -> None:
        """Pure decode steps of up to max_bs requests through cuda_graph.PaddedDecode: captured CUDA
        graphs (capture=True, CUDA only), or the same padded buffers run eagerly (tests)."""
        self.decode_graphs = PaddedDecode(self.model, self.req_to_token.table, self.num_rows, self.num_slots,
                                          max_bs, capture)

    @property
    def kv_bytes_per_token(self) -> int:
        return KVPool.bytes_per_token(self.config.num_layers, self.config.num_kv_heads, self.config.head_dim,
                                      self.dtype)

    def kv_identity(self, block_size: int) -> dict:
        """What must match before this runner may load KV blocks another server wrote."""
        return kv_identity(self.model_path, self.config, self.dtype, block_size)

    @property
    def payload_checksum(self):
        """The disk tier's checksum of KV payloads (None: crc32); see radix_cache/disk_store.py."""
        return payload_checksum()

    def read_kv(self, slots: list, block_size: int, pinned: bool = False) -> list:
        """KV of whole blocks of slots, one contiguous bytes-like payload per block (disk and host tiers;
        pinned: page-locked, for the host tier)."""
        return read_blocks(self.kv_pool, slots, block_size, pinned)

    def write_kv(self, slots: list, payloads: list) -> None:
        write_blocks(self.kv_pool, slots, payloads)

    def forward_step(self, plan) -> list:
        """Run every entry of the plan; returns one EntryResult per entry, in order.

        Sets `last_mask_seconds`: the wall time this step spent filling and applying grammar masks
        (host time: on CUDA the copy and the masked fill are only launched), None when no sampled
        row was constrained."""
        self.last_mask_seconds = None
        with torch.inference_mode():
            marks = self.tp_leader.table_marks(plan.entries) if self.tp_leader else None
            fb, sample_rows, logprob_rows = self._build_batch(plan.entries)
            if self.tp_leader:
                self.tp_leader.send_step(fb, plan.entries, marks, self.req_to_token.table)
            if self._padded_decode_applies(plan.entries, fb):
                logits = self.decode_graphs.run(fb)                  # [B, V] float32
            else:
                hidden = self.model.forward(fb)                      # [T, hidden]
                logits = self.model.compute_logits(hidden[fb.logits_indices])  # [N, V] float32
            return self._sample(plan.entries, logits, sample_rows, logprob_rows)

    def _padded_decode_applies(self, entries, fb) -> bool:
        """A pure decode step: one sampled token per entry, no draft, no prompt logprobs."""
        return (self.decode_graphs is not None and self.decode_graphs.can_run(fb)
                and all(e.sample and not e.draft and not e.logprob_positions for e in entries))

    def _build_batch(self, entries):
        """A sampled entry with a draft of k tokens takes logits at its last k + 1 positions: the
        token after the real ones, and after each draft token."""
        table = self.req_to_token.table
        input_ids, out_loc, logits_idx = [], [], []
        table_rows, table_cols, table_slots = [], [], []   # req_to_token entries this step writes
        sample_rows, logprob_rows = {}, {}
        offset = 0
        for i, e in enumerate(entries):
            req, end = e.req, e.prefix_len + e.extend_len
            if req.table_len < end:
                table_rows.extend([req.row] * (end - req.table_len))
                table_cols.extend(range(req.table_len, end))
                table_slots.extend(req.kv_slots[req.table_len:end])
                req.table_len = end
            real = e.extend_len - len(e.draft)
            input_ids.extend(req.fill_ids[e.prefix_len:e.prefix_len + real])
            input_ids.extend(e.draft)
            out_loc.extend(req.kv_slots[e.prefix_len:end])
            if e.logprob_positions:
                logprob_rows[i] = len(logits_idx)
                logits_idx.extend(offset + q - e.prefix_len for q in e.logprob_positions)
            if e.sample:
                sample_rows[i] = len(logits_idx)
                logits_idx.extend(range(offset + real - 1, offset + e.extend_len))
            offset += e.extend_len
        if table_rows:
            rows_t, cols_t, slots_t = self.stager.to_device([table_rows, table_cols, table_slots])  # [W] each
            table[rows_t, cols_t] = slots_t.to(torch.int32)
        fb = ForwardBatch.build(input_ids, [e.prefix_len for e in entries], [e.extend_len for e in entries],
                                [e.req.row for e in entries], out_loc, table, logits_idx, self.device,
                                stager=self.stager)
        return fb, sample_rows, logprob_rows

    def _sample(self, entries, logits, sample_rows, logprob_rows) -> list:
        results = [EntryResult() for _ in entries]
        if sample_rows:
            self._sample_entries(entries, logits, sample_rows, results)
        for i, start in logprob_rows.items():
            e = entries[i]
            n = len(e.logprob_positions)
            targets = [e.req.fill_ids[q + 1] for q in e.logprob_positions]
            lp, top = compute_logprobs(logits[start:start + n], targets, e.req.top_logprobs_num)
            results[i].input_logprobs = [[lp[k], targets[k], top[k] if e.req.top_logprobs_num else None]
                                         for k in range(n)]
        return results

    def _sample_entries(self, entries, logits, sample_rows, results) -> None:
        """Sample every sampled position; an entry with a draft keeps the longest run of draft tokens
        equal to what was sampled at their positions, then the token sampled after that run.

        Position j of a draft is sampled as plain decoding would sample it after the first j draft
        tokens (penalties, min_new_tokens, grammar mask and seed of that output length), so keeping
        draft token x exactly when the sample is x accepts it with probability p(x) and otherwise
        gives a sample from p with x removed: outputs are distributed as without drafts, and a
        seeded request gives the same tokens."""
        idx = list(sample_rows)
        row_entry, row_outputs, row_logits, first_row = [], [], [], {}
        for i in idx:
            e = entries[i]
            first_row[i] = len(row_entry)
            for j in range(len(e.draft) + 1):
                row_entry.append(i)
                row_outputs.append(e.req.output_ids if j == 0 else e.req.output_ids + e.draft[:j])
                row_logits.append(sample_rows[i] + j)
        reqs = [entries[i].req for i in row_entry]
        if row_logits == list(range(logits.shape[0])):
            sample_logits = logits   # a decode step samples every row in order: no copy
        else:
            sample_logits = logits[self.stager.to_device([row_logits])[0]]   # [R, V]
        inputs = SamplingInputs.prepare([r.sampling_params for r in reqs], [r.origin_input_ids for r in reqs],
                                        row_outputs, self.eos_token_ids, self.vocab_size, device=logits.device)
        masked, legal, forced = self._apply_grammar_masks(entries, idx, first_row, sample_logits)
        next_ids = sample(masked, inputs).tolist()
        kept_rows, kept_tokens = {}, {}
        for i in idx:
            e, first = entries[i], first_row[i]
            draft = e.draft[:legal.get(i, len(e.draft))]
            a = 0
            while a < len(draft) and next_ids[first + a] == draft[a]:
                a += 1
            # where the grammar forces text after the draft, jump-forward appends it instead of a sample
            tokens = draft[:a] if a == len(draft) and i in forced else draft[:a] + [int(next_ids[first + a])]
            kept_rows[i], kept_tokens[i] = list(range(first, first + a + 1)), tokens
            results[i].next_token = tokens[0]
            if e.draft:
                results[i].next_tokens = tokens
        want = [i for i in idx if entries[i].req.return_logprob]
        if want:
            rows = [r for i in want for r in kept_rows[i]]
            targets = [t for i in want for t in kept_tokens[i]]
            lp, top = compute_logprobs(sample_logits[self.stager.to_device([rows])[0]], targets,
                                       max(entries[i].req.top_logprobs_num for i in want))
            at = 0
            for i in want:
                k, n = entries[i].req.top_logprobs_num, len(kept_tokens[i])
                pairs = [(lp[at + j], top[at + j][:k] if k else None) for j in range(n)]
                at += n
                results[i].output_logprob, results[i].output_top = pairs[0]
                if entries[i].draft:
                    results[i].token_logprobs = pairs

    def _apply_grammar_masks(self, entries, idx, first_row, logits):
        """logits [R, V] (rows of entry i from first_row[i]) -> (a copy with -inf where a request's
        grammar forbids the token, or `logits` itself when no request is constrained; {entry: how
        many of its draft tokens the grammar allows}; the entries whose draft ends where the grammar
        forces text). `logits` stays unmasked for the logprobs.

        A draft's row j is masked in the state after its first j tokens: the matcher accepts them in
        turn, stops at the first it refuses (the draft ends there) or, with entry.draft_jump_forward,
        after the first that leaves forced text (plain decoding would jump forward there, not sample),
        and rolls them all back.

        Masking before sample()'s logit bias and penalties equals masking between them, where the
        sampler's contract places it: those are finite and keep -inf at -inf. Timed into
        last_mask_seconds."""
        constrained = [i for i in idx if getattr(entries[i].req, "grammar", None) is not None]
        if not constrained:
            return logits, {}, set()
        started = time.perf_counter()
        # [R, W] on the host, where xgrammar fills it; pinned on CUDA so its copy to the logits is asynchronous
        bitmask = torch.empty((logits.shape[0], (self.vocab_size + 31) // 32), dtype=torch.int32, device="cpu",
                              pin_memory=self.pin_host)
        rows, legal, forced = [], {}, set()
        for i in constrained:  # free rows stay unfilled: apply_grammar_bitmask never reads them
            e = entries[i]
            grammar, draft, first = e.req.grammar, e.draft, first_row[i]
            grammar.fill_bitmask(bitmask, first)
            rows.append(first)
            n = 0
            while n < len(draft) and not grammar.is_terminated() and grammar.accept_token(draft[n]):
                n += 1
                if e.draft_jump_forward and not grammar.is_terminated() and grammar.find_jump_forward_string():
                    forced.add(i)
                    break
                if not grammar.is_terminated():
                    grammar.fill_bitmask(bitmask, first + n)
                    rows.append(first + n)
            grammar.rollback(n)
            legal[i] = n
        masked = apply_grammar_bitmask(logits, bitmask, rows, self.vocab_size)      # [R, V]
        self.last_mask_seconds = time.perf_counter() - started
        return masked, legal, forced


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
