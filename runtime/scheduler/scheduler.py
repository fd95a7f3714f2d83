"""Scheduler: recv -> plan a batch -> forward + sample -> update requests -> send token outputs.

Takes its inbox and outbox as objects (`recv(block) -> list`, `send(msg)`), so tests drive the real
loop in-process with a tiny model; the scheduler process wires them to ZMQ.
"""

import logging
import time

from radixlm.constrained.backend import grammar_key
from radixlm.constrained.queue import GrammarQueue
from radixlm.radix_cache.ledger import LedgerError
from radixlm.runtime import io_struct as io
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.scheduler.finish import FinishChecker, abort_reason, grammar_stopped
from radixlm.runtime.scheduler.forced_text import ForcedText
from radixlm.runtime.scheduler.hybrid_rules import scheduler_config_for
from radixlm.runtime.scheduler.kv_manager import KVManager
from radixlm.runtime.scheduler.launcher import StepLauncher
from radixlm.runtime.scheduler.output import OutputBuilder
from radixlm.runtime.scheduler.plan import PlanLimits, Planner
from radixlm.runtime.scheduler.policy import SchedulePolicy
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.server_info import server_info
from radixlm.runtime.scheduler.stats import SchedulerStats
from radixlm.runtime.scheduler.thinking import Thinking

logger = logging.getLogger(__name__)
STOP_DRAIN_S = 3.0   # on SIGTERM, queued disk writes may take this long (launch.Backend.stop waits 5 s)


class Scheduler:
    def __init__(self, config, runner, tokenizer, inbox, outbox):
        config = scheduler_config_for(config, runner)
        self.config = config
        self.runner = runner
        self.inbox, self.outbox = inbox, outbox
        self.context_len = runner.context_len
        self.vocab_size = runner.vocab_size
        self.kv = KVManager(runner.num_slots, runner.num_rows, config.page_size, config.disable_radix_cache,
                            getattr(runner, "state_snapshot_slots", ()))
        self.policy = SchedulePolicy(config.schedule_policy, self.kv.tree, config.schedule_age_limit)
        chunk = config.chunked_prefill_size
        budget = min(config.max_prefill_tokens, chunk) if chunk > 0 else config.max_prefill_tokens
        self.speculator = self._speculator(config)
        self.planner = Planner(self.kv, PlanLimits(config.max_running_requests, budget, chunk <= 0,
                                                    self.context_len), config.new_token_ratio,
                               speculator=self.speculator)
        self.finish = FinishChecker(tokenizer, runner.eos_token_ids, self.context_len)
        self.tokenizer = tokenizer
        self.grammar_queue = self._grammar_queue(config, tokenizer, runner)
        self.evict_saver = None        # the tree's on_evict with a host tier or write-back (kv_tiers.build_kv_tiers)
        self.disk = self._disk_tier(config, runner)
        self.out = OutputBuilder(disk_tier=self.disk is not None and self.disk.store is not None,
                                 speculative=bool(config.speculative_algorithm),
                                 host_tier=self.disk is not None and self.disk.host is not None)
        self.forced = ForcedText(tokenizer, self.finish, self.context_len, config.disable_jump_forward)
        self.stats = SchedulerStats()
        self.waiting: list = []
        self.running: list = []
        self.step_no = 0
        self.stopped = False
        self.overlap = config.overlap_schedule
        self.launcher = StepLauncher(runner, self.vocab_size, self.stats, self._apply, self._fail_step)
        self.stop_requested_at = None
        self.after_step: list = []     # callables run after every step (progress log, metrics)
        self.handlers = {
            io.TokenizedGenerateReq: self.handle_generate,
            io.AbortReq: self.handle_abort,
            io.FlushCacheReq: self.handle_flush,
            io.GetServerInfoReq: self.handle_server_info,
        }

    # ---- loop ----
    def run_forever(self) -> None:
        while not self.stopped:
            for msg in self.inbox.recv(block=not self.has_work()):
                try:
                    self.handlers[type(msg)](msg)
                except Exception:
                    logger.exception("failed to handle %s", type(msg).__name__)
            if self.has_work():
                self.step()
                for hook in self.after_step:
                    try:
                        hook()
                    except Exception:
                        logger.exception("after-step hook failed")

    def request_stop(self) -> None:
        """Stop after the current step (a signal handler may call it, more than once); see shutdown()."""
        if not self.stopped:
            self.stopped = True
            self.stop_requested_at = time.monotonic()
            if self.disk is not None:
                self.disk.stopping()

    def shutdown(self, drain_s: float = STOP_DRAIN_S) -> dict:
        """After run_forever returns: queued disk writes get until drain_s after request_stop() to finish."""
        if self.disk is None:
            return {}
        started = self.stop_requested_at or time.monotonic()
        self.disk.stopping()
        persisted = self.evict_saver.persist() if self.evict_saver is not None else 0
        return self.disk.close(started + drain_s, persisted)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.launcher.in_flight is not None or (self.grammar_queue and len(self.grammar_queue))
                    or (self.disk and self.disk.busy()))

    def step(self) -> None:
        """Plan a step and launch it; apply the results of the step launched before.  With overlap
        scheduling the step launched here is collected by the next call, so the host plans and stages step
        N+1 (and turns step N's results into outputs) while the device runs it; a step that needs step
        N's tokens on the host first (drafts, penalties, KV retraction) collects N before it is planned,
        and a step with grammar masks collects N between its forward and its sampling (launcher.py)."""
        self.step_no += 1
        self._poll_grammars()
        if self.disk:
            self.waiting.extend(self.disk.poll())
        if self.launcher.in_flight is not None and not self._may_overlap():
            self.launcher.collect()
        if not (self.waiting or self.running):
            self.launcher.collect()
            self._flush_outputs()
            if self.disk:
                self.disk.release_installed()
            if self.grammar_queue or self.disk:
                time.sleep(0.001)   # only compiles or disk loads are pending: do not spin
            return
        ordered = self.policy.order(self.waiting, self.step_no)
        plan = self.planner.plan(self.running, ordered, self._on_admit, self._retract, self._out_of_memory)
        if self.disk:
            self.disk.release_installed()
        if plan.empty:
            self.launcher.collect()
        else:
            self.launcher.launch(plan)
        if not self.overlap:
            self.launcher.collect()
        self.planner.decay_ratio()
        self._flush_outputs()
        if self.config.check_ledger:
            self.check_ledger()

    def _may_overlap(self) -> bool:
        return self.speculator is None and self.launcher.may_overlap(
            self.kv.available(), lambda: self.planner.decode_need(self.planner.decoding(self.running)))

    def _fail_step(self, plan, exc) -> None:
        logger.error("forward failed; aborting %d requests", len(plan.entries), exc_info=exc)
        for entry in plan.entries:
            if not entry.req.finished:
                self._finish(entry.req, abort_reason(f"internal error: {exc}", 500), cache=False)
        self._flush_outputs()

    def _apply(self, entry, result) -> None:
        req = entry.req
        if result.input_logprobs:
            req.input_logprobs.extend(result.input_logprobs)
        if req.aborted or req.finished:
            return
        if not entry.sample:
            self.kv.cache_unfinished(req)
            return
        first_output = not req.prefill_done
        if first_output:
            req.prefill_done = True
            if req.return_logprob and req.logprob_start_len >= 0:
                req.pending_input_logprobs = self._input_logprobs_with_head(req)
        if req.sampling_params.max_new_tokens == 0:
            self._finish(req, {"type": "length", "length": 0})
            return
        tokens = result.next_tokens if result.next_tokens is not None else [result.next_token]
        reason, used = None, len(tokens)
        for j, token in enumerate(tokens):
            stopped = grammar_stopped(req)
            if stopped is not None:   # the engine ran past its limits: its mask allowed nothing
                self.kv.trim(req, len(req.fill_ids))
                self._finish(req, stopped)
                return
            if token is not None and token < 0:   # sampler.NAN_TOKEN: the logits held NaN
                logger.error("request %s: the model produced NaN logits; failing the request", req.rid)
                self._finish(req, abort_reason("internal error: the model produced NaN logits for this request, "
                                                "so no token could be sampled", 500), cache=False)
                return
            req.fill_ids.append(token)     # the output is the tail of the token list
            if req.return_logprob:
                lp, top = (result.output_logprob, result.output_top) if result.token_logprobs is None \
                    else result.token_logprobs[j]
                req.pending_output_logprobs.append([lp, token, top])
            if req.grammar is not None and not req.grammar.accept_token(token):
                self.kv.trim(req, len(req.fill_ids) - 1)
                self._finish(req, grammar_stopped(req) or
                             abort_reason(f"internal error: the grammar refused sampled token {token}", 500))
                return
            reason = self.finish.check(req)
            if req.grammar is not None and req.grammar.is_terminated() and (reason is None or reason["type"] != "stop"):
                reason = {"type": "stop", "matched": token if token in self.finish.eos_token_ids else None}
            if reason is not None and req.thinking is not None and req.thinking.stops_early(reason, token):
                reason, used = self.forced.answer_instead_of_stop(req, entry, reason, self.kv), j + 1
                break
            if reason is not None:
                break
            if req.thinking is not None and req.thinking.saw_end(req) and req.grammar is not None:
                used = j + 1       # the draft's tokens after the thinking were never masked: dropped
                break
        req.forward_passes += 1
        if entry.draft:
            self.kv.trim(req, len(req.fill_ids) - 1)   # the KV of rejected (or never used) draft tokens goes back
            self.speculator.record(req, len(entry.draft), used - 1)
        if reason is not None:
            self._finish(req, reason)
        else:
            if req.stream or first_output:  # a non-streamed request is next sent when it finishes
                self.out.add(req)
            if first_output or entry.extend_len - len(entry.draft) > 1:
                # the sampled token's KV is not computed yet (a step in flight may be computing it)
                self.kv.cache_unfinished(req, len(req.fill_ids) - 1)
            fed, last = len(req.fill_ids), req.fill_ids[-1]
            reason = self.forced.after_token(req)
            if reason is None and req.in_flight and (len(req.fill_ids) != fed or req.fill_ids[fed - 1] != last):
                self.kv.trim(req, fed - 1)   # the step in flight feeds `last` where forced text now goes: undone
            if reason is not None:
                self._finish(req, reason)

    def _speculator(self, config):
        if not config.speculative_algorithm:
            return None
        if config.speculative_algorithm != "ngram":
            raise ValueError(f"speculative_algorithm must be ngram, not {config.speculative_algorithm!r}")
        if config.page_size != 1:
            raise ValueError("speculative decoding needs page_size 1")
        from radixlm.runtime.speculative.speculator import Speculator

        return Speculator(self.kv.tree, config.speculative_num_draft_tokens, config.speculative_max_step_tokens,
                          self.context_len, jump_forward_on=lambda req: req.grammar is not None and self.forced.jump_forward_on(req))

    # ---- grammars ----
    def _grammar_queue(self, config, tokenizer, runner):
        if config.grammar_backend == "none" or tokenizer is None:
            return None
        if config.grammar_backend not in ("xgrammar", "llguidance", "auto"):
            raise ValueError(f"grammar_backend must be xgrammar, llguidance, auto or none, not "
                             f"{config.grammar_backend!r}")
        from radixlm.constrained.backend import GrammarBackend

        backend = GrammarBackend(tokenizer, runner.vocab_size, runner.eos_token_ids, timeout_s=config.grammar_timeout,
                                 engine=config.grammar_backend, bounded_numbers=not config.json_unbounded_numbers,
                                 json_indent=config.json_indent)
        return GrammarQueue(backend, config.grammar_timeout)

    def _poll_grammars(self) -> None:
        if not self.grammar_queue:
            return
        ready, failed = self.grammar_queue.poll()
        for req in ready:
            if req.thinking is not None:
                req.thinking.hold(req)
            self._enqueue(req)
        for req, message in failed:
            req.finish_reason = abort_reason(message)
            self.out.add(req)

    # ---- disk tier ----
    def _disk_tier(self, config, runner):
        """The tiers below the device (host memory, disk): None when neither is set."""
        from radixlm.runtime.scheduler.kv_tiers import build_kv_tiers

        tier, self.evict_saver = build_kv_tiers(config, self.kv, runner)
        return tier

    def _enqueue(self, req) -> None:
        """A new request joins the waiting queue, or first waits for its prefix blocks from disk."""
        if self.disk is None or not self.disk.on_arrival(req):
            self.waiting.append(req)

    def _input_logprobs_with_head(self, req) -> list:
        """Input logprobs from logprob_start_len; the first prompt token has none (null)."""
        start = req.logprob_start_len
        head = [[None, req.origin_input_ids[0], None]] if start == 0 else []
        return head + req.input_logprobs

    def _finish(self, req, reason, cache: bool = True) -> None:
        if req.in_flight:   # a launched step feeds or samples past the end: its KV goes back, its token is dropped
            req.in_flight = 0
            if req.row is not None:
                fed = len(req.fill_ids) - (0 if self.launcher.recurrent else 1)   # a state was fed it: its KV stays
                keep = max(req.cached_len, min(len(req.kv_slots), fed))
                self.kv.trim(req, min(len(req.kv_slots), keep + -keep % self.kv.page_size))   # whole pages only
        req.finish_reason = reason
        req.grammar = None
        if req in self.running:
            self.running.remove(req)
        self.kv.release(req, cache=cache)
        self.stats.finished += 1
        self.out.add(req)

    def _on_admit(self, req) -> None:
        self.waiting.remove(req)
        if not req.prefill_done:
            self.stats.cached_prompt_tokens += req.cached_tokens

    def _retract(self, req) -> None:
        self.kv.release(req, cache=True)
        req.retractions += 1
        self.stats.retracted += 1
        self.waiting.insert(0, req)

    def _out_of_memory(self, req) -> None:
        self._finish(req, abort_reason("out of KV cache memory: the request does not fit even alone", 503),
                     cache=False)

    def _flush_outputs(self) -> None:
        msg = self.out.build()
        if msg is not None:
            self.outbox.send(msg)

    # ---- handlers ----
    def handle_generate(self, msg: io.TokenizedGenerateReq) -> None:
        try:
            params = SamplingParams.received(msg.sampling_params, self.vocab_size)
            self._validate_length(msg.input_ids)
        except ValueError as exc:
            self._reject(msg, str(exc))
            return
        key = grammar_key(params)
        if key is not None and self.grammar_queue is None:
            why = ("--grammar-backend none" if self.config.grammar_backend == "none" else "no tokenizer loaded")
            self._reject(msg, f"constrained decoding (json_schema, regex, ebnf, response_format) is disabled on "
                              f"this server ({why}); send the request without a constraint")
            return
        req = Req(msg.rid, msg.input_ids, params, msg.return_logprob, msg.logprob_start_len,
                  msg.top_logprobs_num, msg.stream, arrival_step=self.step_no, cache_namespace=msg.cache_namespace)
        if params.think_end_ids:
            req.thinking = Thinking(params.think_end_ids, params.max_thinking_tokens)
        self.stats.received += 1
        if key is None:
            self._enqueue(req)
        else:
            self.grammar_queue.add(req, key)

    def _validate_length(self, input_ids) -> None:
        if not input_ids:
            raise ValueError("the prompt is empty: send at least one token")
        if any((not isinstance(t, int)) or t < 0 or t >= self.vocab_size for t in input_ids):
            raise ValueError(f"input_ids must be integers in [0, {self.vocab_size})")
        if len(input_ids) >= self.context_len:
            raise ValueError(f"the prompt has {len(input_ids)} tokens; this model's context length is "
                             f"{self.context_len}")
        if len(input_ids) + self.kv.page_size >= self.kv.allocator.total:
            raise ValueError(f"the prompt has {len(input_ids)} tokens, more than the KV cache can hold "
                             f"({self.kv.allocator.total} tokens)")

    def _reject(self, msg, message: str) -> None:
        req = Req(msg.rid, msg.input_ids or [0], SamplingParams(), arrival_step=self.step_no)
        req.finish_reason = abort_reason(message)
        self.out.add(req)
        self._flush_outputs()

    def handle_abort(self, msg: io.AbortReq) -> None:
        for req in self.grammar_queue.remove(msg.rid) if self.grammar_queue else []:
            req.finish_reason = abort_reason("aborted", 499)
            self.out.add(req)
        for req in self.disk.remove(msg.rid) if self.disk else []:
            req.finish_reason = abort_reason("aborted", 499)
            self.out.add(req)
        for req in list(self.waiting):
            if req.rid == msg.rid:
                self.waiting.remove(req)
                req.finish_reason = abort_reason("aborted", 499)
                self.out.add(req)
        for req in list(self.running):
            if req.rid == msg.rid:
                req.aborted = True
                self._finish(req, abort_reason("aborted", 499))
        self.launcher.collect_if_done()
        self._flush_outputs()

    def handle_flush(self, msg) -> None:
        if self.has_work():
            ok, message = False, "cannot flush the cache while requests are running or queued"
        else:
            ok = self.kv.flush()
            message = "cache flushed" if ok else "cache is in use"
        self.outbox.send(io.ControlOut(kind="flush_cache", success=ok, message=message))

    def handle_server_info(self, msg) -> None:
        self.outbox.send(io.ControlOut(kind="server_info", info=self.server_info()))

    def server_info(self) -> dict:
        return server_info(self)

    def check_ledger(self) -> None:
        """Prove the ledger; a broken one is logged (and raised in tests), never hidden."""
        try:
            self.kv.check(self.running)
        except LedgerError:
            logger.exception("KV ledger check failed")
            raise
