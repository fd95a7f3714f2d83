"""ModelRunner: turns a StepPlan into tensors, runs the model, samples, computes logprobs.

The only part of the scheduler process that touches torch.  Owns the model, the KV pool and the
req_to_token table; the scheduler owns which slots each request uses (req.kv_slots).
"""

import logging
import time
from typing import Optional

import torch

from radixlm.runtime.models.gguf_weights import quantization_name
from radixlm.runtime.runner.cuda_graph import DEFAULT_MAX_BS, PaddedDecode
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.kv_blocks import kv_identity, payload_checksum, read_blocks, write_blocks
from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool, resolve_kv_dtype
from radixlm.runtime.runner.model_setup import (
    WARMUP_TOKENS,
    build_model,
    kv_budget,
    recurrent_rows,
    resize_after_warm_up,
)
from radixlm.runtime.runner.sampler import (
    RowSamplingTable,
    SamplingInputs,
    apply_grammar_bitmask,
    compute_logprobs,
    sample,
)
from radixlm.runtime.runner.step_inputs import StepInputStager
from radixlm.runtime.runner.step_lists import step_lists
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.step import EntryResult, StepBatch, StepRow

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model_path: str, dtype: str = "float32", max_total_tokens: Optional[int] = None,
                 mem_fraction: float = 0.2, num_rows: int = 264, attention_backend: str = "auto",
                 context_length: Optional[int] = None, device: Optional[str] = None, deterministic: bool = False,
                 disable_cuda_graph: bool = False, cuda_graph_max_bs: int = DEFAULT_MAX_BS,
                 tp: Optional[dict] = None, load_format: Optional[str] = None, quantization: Optional[str] = None,
                 kv_cache_dtype: str = "auto", gguf: Optional[str] = None, state_snapshots: Optional[int] = None):
        """tp: this rank's place in a --tp-size group (distributed.topology.TPTopology.rank_config); rank 0 then
        broadcasts every step to the other ranks (distributed/step_sync.py).  With tp, the KV pool is sized
        from the budget alone and CUDA graphs are off: a warm-up forward or a padded step on rank 0 alone
        would not match the other ranks' collectives.  quantization: None or "fp8" (fp8 weights, models/fp8_model.py);
        kv_cache_dtype: "auto" (the model dtype) or "fp8_e4m3" (memory_pool.KVPool; triton or torch attention).
        gguf: the .gguf file model_path was converted from, whose weights are then kept quantized
        (--quantization gguf, CPU only).  state_snapshots: for a model with a recurrent state per request, how many
        snapshots of it the radix cache may keep (None: one per request row; 0: no prefix caching)."""
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.pin_host = torch.device(self.device).type == "cuda"   # host staging buffers pinned (async copies)
        self.stager = StepInputStager(self.device)
        self.model_path = model_path
        torch.set_grad_enabled(False)
        self.dtype = resolve_dtype(dtype, self.device)
        self.kv_dtype = resolve_kv_dtype(kv_cache_dtype, self.dtype)
        self.tp = self.tp_leader = None
        if tp is not None:
            from radixlm.runtime.distributed.group import TensorParallel
            self.tp = TensorParallel(**tp, device=self.device)
        # CUDA: size the KV pool after a warm-up forward
        after_warm_up = self.pin_host and not max_total_tokens and self.tp is None
        budget = ((lambda cfg: WARMUP_TOKENS) if after_warm_up
                  else (lambda cfg: kv_budget(cfg, self.kv_dtype, max_total_tokens, mem_fraction, self.device) + 1))
        self.model, self.config, self.kv_pool = build_model(
            model_path, self.dtype, self.device, attention_backend, budget, deterministic, self.tp,
            load_format=load_format, quantization=quantization, kv_dtype=self.kv_dtype, gguf=gguf)
        self.quantization = quantization_name(getattr(self.model, "quantization", None)) if gguf else (
            quantization or "none")
        if self.tp is not None and self.tp.is_leader:
            from radixlm.runtime.distributed.step_sync import StepLeader
            self.tp_leader = StepLeader(self.tp)
        self.context_len = min(context_length or self.config.context_length, self.config.context_length)
        self.vocab_size = self.config.vocab_size
        self.eos_token_ids = set(self.config.eos_token_ids)
        self.recurrent_state = bool(getattr(self.model, "recurrent_state", False))
        if self.recurrent_state:   # a fixed-size state per table row (models/recurrent_state.py)
            num_rows = recurrent_rows(self.model.states, num_rows, self.device, 1 if state_snapshots == 0 else 2)
        self.num_rows = num_rows
        self.last_mask_seconds: Optional[float] = None   # see launch_sampling
        self.req_to_token = ReqToTokenPool(num_rows + 1, self.context_len + 1, self.device)  # + padding's scratch row
        self.row_tokens = torch.zeros(num_rows + 1, dtype=torch.int64, device=self.device)  # [R] last sample per row
        self.row_sampling = RowSamplingTable(num_rows + 1, self.vocab_size, self.device)
        self.state_snapshot_slots = range(0)   # state slots the radix cache keeps snapshots in (after the rows')
        if self.recurrent_state:
            snapshots = num_rows if state_snapshots is None else state_snapshots
            self.model.states.allocate(num_rows + 1 + snapshots)
            self.state_snapshot_slots = range(num_rows + 1, num_rows + 1 + snapshots)
            logger.info("recurrent state: %.1f MiB for %d request rows and %d cached snapshots",
                        self.model.states.bytes_per_row() * (num_rows + 1 + snapshots) / 2**20, num_rows, snapshots)
        if after_warm_up:
            resize_after_warm_up(self.model, self.kv_pool, self.req_to_token.table, lambda free: kv_budget(
                self.config, self.kv_dtype, None, mem_fraction, self.device, free), self.device)
        self.num_slots = self.kv_pool.num_slots - 1   # the last slot is padding's scratch (cuda_graph.py)
        self.decode_graphs: Optional[PaddedDecode] = None
        if self.recurrent_state and self.pin_host and not disable_cuda_graph:
            logger.info("CUDA graphs off: the gated delta-net layers step each request's state on the host's lists")
        elif self.pin_host and not disable_cuda_graph and self.tp is None:
            backend = self.model.attn_backend
            chunked = any("chunk" in v for v in getattr(backend, "layer_variants", {}).values())
            if getattr(backend, "name", None) == "triton" and not chunked:
                self.use_padded_decode(cuda_graph_max_bs, capture=True)
            else:   # the torch reference (also Llama 4's chunked layers') reads lengths back to the host
                logger.info("CUDA graphs off: they need the triton attention backend on every layer")
        if self.pin_host and self.tp is None:
            self._warm_up()
        logger.info("KV cache: %d tokens (%.1f MiB, %s), context length %d", self.num_slots,
                    self.num_slots * self.kv_bytes_per_token / 2**20,
                    str(self.kv_dtype).replace("torch.", ""), self.context_len)

    def _warm_up(self) -> None:
        """CUDA, before the server says it is ready: every Triton kernel variant compiled, then a few real steps
        (prefills of several lengths, an extend on a cached prefix, sampled, greedy and logprob rows) on table
        row 0 and the first KV slots, which no request holds yet, so the first requests compile and load
        nothing (a second's stall otherwise)."""
        started = time.perf_counter()
        if getattr(self.model.attn_backend, "name", None) == "triton":
            from radixlm.kernels.triton_warmup import warm_up_triton
            c = self.config
            warm_up_triton(self.device, self.dtype, c.num_heads, c.num_kv_heads, c.head_dim,
                           kv_dtype=self.kv_pool.dtype, num_layers=c.kv_layers,
                           max_context=self.req_to_token.table.shape[1])
        sampled = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, seed=1)
        greedy = SamplingParams(temperature=0.0)
        for n, prefix in ((1, 0), (5, 0), (37, 0), (300, 0), (64, 300), (1, 364)):
            if prefix + n >= min(self.num_slots, self.req_to_token.table.shape[1] - 1):
                break
            end = prefix + n
            row = StepRow("warm-up", 0, prefix, n, [1] * n, list(range(prefix, end)), prefix,
                          list(range(prefix, end)), sample=True, sampling=sampled if n % 2 else greedy,
                          output_len=0, return_logprob=n == 5, top_logprobs_num=2 if n == 5 else 0,
                          logprob_positions=list(range(prefix, end - 1)) if n == 5 else [],
                          logprob_targets=[1] * (n - 1) if n == 5 else [])
            self.forward_step(StepBatch([row]))
        self.req_to_token.table[0].zero_()
        self.row_sampling.owner[0] = None
        if self.pin_host:
            torch.cuda.synchronize(self.device)
        logger.info("warm-up: kernels compiled and steps run in %.1f s", time.perf_counter() - started)

    def use_padded_decode(self, max_bs: int, capture: bool) -> None:
        """Pure decode steps of up to max_bs requests through cuda_graph.PaddedDecode: captured CUDA
        graphs (capture=True, CUDA only), or the same padded buffers run eagerly (tests)."""
        self.decode_graphs = PaddedDecode(self.model, self.req_to_token.table, self.num_rows, self.num_slots,
                                          max_bs, capture)

    def expert_load(self) -> dict:
        """Mixture-of-experts models: {layer id as str: [tokens routed to each expert since start]}; else {}."""
        load = getattr(self.model, "expert_load", None)
        return {str(layer): row for layer, row in load().items()} if load is not None else {}

    @property
    def kv_bytes_per_token(self) -> int:
        return KVPool.bytes_per_token(self.config.kv_layers, self.config.num_kv_heads, self.config.head_dim,
                                      self.kv_dtype, self.config.kv_v_is_k)

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

    def forward_step(self, batch) -> list:
        """Run a StepBatch (runtime/step.py) to the end: one EntryResult per row, in order."""
        return self.collect(self.launch(batch))

    def launch(self, batch) -> "LaunchedStep":
        """Build the step's tensors, run the model and sample: launch_forward, then launch_sampling."""
        return self.launch_sampling(self.launch_forward(batch))

    def launch_forward(self, batch) -> "ForwardedStep":
        """Build the step's tensors and launch the model; the logits stay on the device.  A batch's grammar
        mask is read only by launch_sampling, so the scheduler fills it while the device runs the forward."""
        rows = batch.rows
        self.last_mask_seconds = None
        with torch.inference_mode():
            if batch.state_copies:
                self.model.states.copy(batch.state_copies)
            fb, sample_rows, logprob_rows = self._build_batch(rows)
            if self.tp_leader:
                self.tp_leader.send_step(fb, rows, self.req_to_token.table)
            if self._padded_decode_applies(rows, fb):
                logits = self.decode_graphs.run(fb)                  # [B, V] float32
            else:
                hidden = self.model.forward(fb)                      # [T, hidden]
                logits = self.model.compute_logits(hidden[fb.logits_indices])  # [N, V] float32
        return ForwardedStep(batch, fb, logits, sample_rows, logprob_rows)

    def launch_sampling(self, fwd: "ForwardedStep") -> "LaunchedStep":
        """Sample the forwarded step (its batch's mask applied); the sampled ids stay on the device (each
        sampled row's table row remembers its token, which a later step's PENDING input reads) and cross
        to the host asynchronously.  Rows with drafts or logprobs are finished here (they need the ids on
        the host); collect() waits for the rest.

        Sets `last_mask_seconds`: the wall time this step spent filling and applying grammar masks
        (host time: on CUDA the copy and the masked fill are only launched), None when no sampled
        row was constrained."""
        batch, logits = fwd.batch, fwd.logits
        rows = batch.rows
        with torch.inference_mode():
            step = LaunchedStep([EntryResult() for _ in rows])
            if fwd.sample_rows:
                self._sample_rows(batch, fwd.fb, logits, fwd.sample_rows, step)
            for i, start in fwd.logprob_rows.items():
                r = rows[i]
                n = len(r.logprob_positions)
                lp, top = compute_logprobs(logits[start:start + n], r.logprob_targets, r.top_logprobs_num)
                step.results[i].input_logprobs = [[lp[k], r.logprob_targets[k], top[k] if r.top_logprobs_num
                                                   else None] for k in range(n)]
            return step

    def collect(self, step: "LaunchedStep") -> list:
        """The launched step's results; waits for its sampled ids to reach the host."""
        if step.host_ids is not None:
            if step.ready is not None:
                step.ready.synchronize()
            ids = step.host_ids.tolist()
            for i, token in zip(step.pending_rows, ids):
                step.results[i].next_token = token
            step.host_ids = None
        return step.results

    def _padded_decode_applies(self, rows, fb) -> bool:
        """A pure decode step: one sampled token per row, no draft, no prompt logprobs."""
        return (self.decode_graphs is not None and self.decode_graphs.can_run(fb)
                and all(r.sample and not r.draft and not r.logprob_positions for r in rows))

    def _build_batch(self, rows):
        lists = step_lists(rows)
        if lists.table_rows:
            rows_t, cols_t, slots_t = self.stager.to_device([lists.table_rows, lists.table_cols,
                                                             lists.table_slots])  # [W] each
            self.req_to_token.table[rows_t, cols_t] = slots_t.to(torch.int32)
        fb = ForwardBatch.build(lists.input_ids, lists.prefix_lens, lists.extend_lens, lists.req_rows, lists.out_loc,
                                self.req_to_token.table, lists.logits_idx, self.device, stager=self.stager)
        if lists.pending_at:
            at_t, from_t = self.stager.to_device([lists.pending_at, lists.pending_rows])   # [P] each
            fb.input_ids[at_t] = self.row_tokens[from_t]
        return fb, lists.sample_rows, lists.logprob_rows

    def _sample_rows(self, batch, fb, logits, sample_rows, step) -> None:
        """Sample every sampled position; a row with a draft keeps the longest run of draft tokens
        equal to what was sampled at their positions, then the token sampled after that run.

        Position j of a draft is sampled as plain decoding would sample it after the first j draft
        tokens (penalties, min_new_tokens, grammar mask and seed of that output length), so keeping
        draft token x exactly when the sample is x accepts it with probability p(x) and otherwise
        gives a sample from p with x removed: outputs are distributed as without drafts, and a
        seeded request gives the same tokens."""
        rows = batch.rows
        idx = list(sample_rows)
        params, prompts, outputs, row_logits, first_row = [], [], [], [], {}
        for i in idx:
            r = rows[i]
            first_row[i] = len(params)
            for j in range(len(r.draft) + 1):
                params.append(r.sampling)
                prompts.append(r.prompt_ids)
                outputs.append(list(r.output_ids) + r.draft[:j] if r.output_ids else range(r.output_len + j))
                row_logits.append(sample_rows[i] + j)
        if row_logits == list(range(logits.shape[0])):
            sample_logits = logits   # a decode step samples every row in order: no copy
        else:
            sample_logits = logits[self.stager.to_device([row_logits])[0]]   # [R, V]
        one_each = len(idx) == len(params)          # one sampled position per row (no drafts)
        table_rows = None
        if one_each:
            table_rows = fb.req_pool_indices if len(idx) == len(rows) else \
                self.stager.to_device([[rows[i].row for i in idx]])[0]              # [R]
        if SamplingInputs.plain_greedy(params, [len(o) for o in outputs]):
            inputs = SamplingInputs.greedy_only()
        else:
            dense = self.row_sampling.gather([rows[i].row for i in idx], params, table_rows) if one_each else None
            inputs = SamplingInputs.prepare(params, prompts, outputs, self.eos_token_ids, self.vocab_size,
                                            device=logits.device, dense=dense)
        masked = sample_logits
        if batch.mask_rows:
            started = time.perf_counter()
            masked = apply_grammar_bitmask(sample_logits, batch.mask, batch.mask_rows, self.vocab_size)  # [R, V]
            self.last_mask_seconds = (batch.mask_seconds or 0.0) + time.perf_counter() - started
        next_ids = sample(masked, inputs)                                    # [R] on the device
        if one_each:   # remember each row's token: a later step's PENDING input reads it on the device
            self.row_tokens[table_rows] = next_ids
        if any(rows[i].draft or rows[i].return_logprob for i in idx):
            self._finish_drafts(rows, idx, first_row, next_ids.tolist(), sample_logits, step.results)
            return
        step.pending_rows = idx
        if self.pin_host:
            step.host_ids = torch.empty(next_ids.shape, dtype=next_ids.dtype, pin_memory=True)   # [R]
            step.host_ids.copy_(next_ids, non_blocking=True)
            step.ready = torch.cuda.Event()
            step.ready.record()
        else:
            step.host_ids = next_ids

    def _finish_drafts(self, rows, idx, first_row, next_ids, sample_logits, results) -> None:
        kept_rows, kept_tokens = {}, {}
        for i in idx:
            r, first = rows[i], first_row[i]
            draft = r.draft[:len(r.draft) if r.draft_legal is None else r.draft_legal]
            a = 0
            while a < len(draft) and next_ids[first + a] == draft[a]:
                a += 1
            # where the grammar forces text after the draft, jump-forward appends it instead of a sample
            tokens = draft[:a] if a == len(draft) and r.draft_forced else draft[:a] + [int(next_ids[first + a])]
            kept_rows[i], kept_tokens[i] = list(range(first, first + a + 1)), tokens
            results[i].next_token = tokens[0]
            if r.draft:
                results[i].next_tokens = tokens
        want = [i for i in idx if rows[i].return_logprob]
        if want:
            flat = [k for i in want for k in kept_rows[i]]
            targets = [t for i in want for t in kept_tokens[i]]
            lp, top = compute_logprobs(sample_logits[self.stager.to_device([flat])[0]], targets,
                                       max(rows[i].top_logprobs_num for i in want))
            at = 0
            for i in want:
                k, n = rows[i].top_logprobs_num, len(kept_tokens[i])
                pairs = [(lp[at + j], top[at + j][:k] if k else None) for j in range(n)]
                at += n
                results[i].output_logprob, results[i].output_top = pairs[0]
                if rows[i].draft:
                    results[i].token_logprobs = pairs


class ForwardedStep:
    """A step whose forward the runner launched: its batch, ForwardBatch and logits [N, V], and where each
    sampled row's and logprob row's logits start."""

    __slots__ = ("batch", "fb", "logits", "sample_rows", "logprob_rows")

    def __init__(self, batch, fb, logits, sample_rows: dict, logprob_rows: dict):
        self.batch, self.fb, self.logits = batch, fb, logits
        self.sample_rows, self.logprob_rows = sample_rows, logprob_rows


class LaunchedStep:
    """A step the runner launched: its results, and for rows sampled on the device the ids on their way
    to the host (host_ids, ready) and which results they fill (pending_rows)."""

    __slots__ = ("results", "host_ids", "ready", "pending_rows")

    def __init__(self, results: list):
        self.results = results
        self.host_ids = self.ready = None
        self.pending_rows: list = []


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
