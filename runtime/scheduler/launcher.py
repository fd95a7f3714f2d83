"""StepLauncher: hands planned steps to the runner as plain data and applies their results.

With overlap scheduling one step stays in flight while the scheduler plans, builds and launches the
next; `may_overlap` says when that is exact.  A request whose next step needs its newest token on the
host before that step is planned (a draft, penalties over the output, a thinking budget) or decodes that
would have to retract someone for KV make the scheduler collect the step in flight first.  A step with
grammar masks is launched in two calls where the runner offers them (launch_forward, launch_sampling):
between them the step before is collected and the masks are filled, while the device runs the forward.
Where that step's tokens end a request or bring forced text (jump-forward), the new step's row for it is
dropped: its result is not applied and its KV is taken back, so the tokens are those of plain scheduling.
Without the two calls a grammar, too, makes the scheduler collect first.

A model with a recurrent state per request (hybrid_rules.py) cannot undo a token its state was fed, and its prefix
snapshots must be taken before the next step feeds the row: there only a step of plain decodes may stay in flight
(a prompt's end or a prefill chunk puts a snapshot in the tree when it is applied), and a grammar makes the scheduler
collect first (jump-forward may replace the token a step in flight feeds).
"""

import time

from radixlm.runtime.scheduler.step_builder import StepBuilder


def reads_history(params) -> bool:
    return params.repetition_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0


def needs_host_token(entry, masks_after_forward: bool = False) -> bool:
    """Whether planning or sampling this entry's request's next step needs the token this step samples.
    masks_after_forward: the next step's grammar masks are filled after its forward is launched, by when
    this step's tokens are applied (so a grammar alone does not need them earlier)."""
    req = entry.req
    return entry.sample and bool(entry.draft or (req.grammar is not None and not masks_after_forward)
                                 or reads_history(req.sampling_params)
                                 or (req.thinking is not None and req.thinking.needs_host()))


def plain_decode(entry) -> bool:
    """One token fed to a request past its prompt, its next sampled: applying it puts nothing in the tree."""
    return entry.sample and entry.req.prefill_done and entry.extend_len == 1 and not entry.draft


class StepLauncher:
    """launch(plan) puts a step in flight; collect() applies its results through `apply(entry, result)`.
    A runner error in either ends that step's requests through `fail(plan, exc)`, never the server."""

    def __init__(self, runner, vocab_size: int, stats, apply, fail):
        self.runner = runner
        self.stats = stats
        self.builder = StepBuilder(vocab_size)
        self.two_calls = hasattr(runner, "launch_forward")   # the runner offers launch_forward + launch_sampling
        self.recurrent = bool(getattr(runner, "recurrent_state", False))
        self.apply, self.fail = apply, fail
        self.in_flight = None   # (plan, runner handle, launch time, mask seconds) of the launched step

    def may_overlap(self, kv_available: int, decode_need) -> bool:
        """Whether the next step can be planned before the step in flight is collected: no sampled request
        in it needs its token on the host first, and `decode_need()` KV slots (the next decodes) fit in
        `kv_available` without retracting anyone."""
        entries = self.in_flight[0].entries
        if any(needs_host_token(e, self.two_calls and not self.recurrent) for e in entries):
            return False
        if self.recurrent and not all(plain_decode(e) for e in entries):
            return False
        return kv_available >= decode_need()

    def launch(self, plan) -> None:
        """Launch `plan`, collecting the step in flight after it is launched (so the device never idles).  A
        step with grammar masks collects it between its forward and its sampling: the masks read the grammars
        after that step's tokens, and the device runs the forward meanwhile."""
        started = time.perf_counter()
        masked = self.builder.needs_masks(plan)
        batch = self.builder.build(plan, masks=False)
        overlapped = self.in_flight is not None
        split = masked and self.two_calls
        collecting = 0.0   # of the launch: the step in flight collected between the forward and the sampling
        try:
            if split:
                forwarded = self.runner.launch_forward(batch)
                collecting = self._mark_in_flight(plan)
                self.builder.fill_masks(plan.entries, batch)
                handle = self.runner.launch_sampling(forwarded)
            else:
                if masked:
                    self.builder.fill_masks(plan.entries, batch)
                handle = self.runner.launch(batch)
        except Exception as exc:  # a model error ends this batch, never the server
            self.fail(plan, exc)
            self.collect()
            return
        self.stats.launch_seconds += time.perf_counter() - started - collecting
        self.stats.record_overlap(overlapped)
        if not split:
            self._mark_in_flight(plan)
        # grammar mask time in that step (runners that never mask may lack it)
        self.in_flight = plan, handle, started, getattr(self.runner, "last_mask_seconds", batch.mask_seconds)

    def _mark_in_flight(self, plan) -> float:
        """The plan's sampled requests count its token as in flight; with a step still in flight, collects it,
        then drops the entries whose request that step's results finished or took back (forced text after
        the token this step feeds: the request's KV is trimmed to before it, as if this step never ran).
        Returns the seconds spent collecting."""
        for e in plan.entries:
            if e.sample:
                e.req.in_flight += 1
        if self.in_flight is None:
            return 0.0
        started = time.perf_counter()
        self.collect()
        for e in plan.entries:
            if e.sample and (e.req.finished or len(e.req.kv_slots) < e.prefix_len + e.extend_len):
                e.dropped = True
                e.req.in_flight = max(0, e.req.in_flight - 1)
                self.stats.dropped_in_flight += 1
        return time.perf_counter() - started

    def collect(self) -> None:
        """Apply the results of the step in flight, if any."""
        if self.in_flight is None:
            return
        plan, handle, started, mask_seconds = self.in_flight
        self.in_flight = None
        waited = time.perf_counter()
        try:
            results = self.runner.collect(handle)
        except Exception as exc:
            self.fail(plan, exc)
            return
        self.stats.collect_wait_seconds += time.perf_counter() - waited
        self.stats.record_step(plan, time.perf_counter() - started, mask_seconds)
        for entry, result in zip(plan.entries, results):
            if entry.dropped:
                continue
            if entry.sample and entry.req.in_flight:
                entry.req.in_flight -= 1
            self.apply(entry, result)

    def collect_if_done(self) -> None:
        """After aborts: collect the step in flight when none of its requests needs its results."""
        if self.in_flight is not None and all(e.req.finished for e in self.in_flight[0].entries):
            self.collect()
