"""How bench/serving.py drives a workload: the sessions it builds, concurrency or Poisson arrivals,
and the long-prompt-stall run that measures a decoding stream while long prompts arrive."""

import asyncio
import contextlib
import math
import random
import sys
import time

import numpy as np
import serving_workloads as wl
from serving_client import Result
from serving_report import to_ms

# ---------------------------------------------------------------- workload

def build_workload(args, counter) -> dict:
    rng = random.Random(args.seed)
    n = args.num_requests
    w = args.workload
    if w == "random":
        return {"sessions": wl.build_random(counter, rng, n, args.input_len, args.output_len, args.range_ratio)}
    if w == "shared-prefix":
        return {"sessions": wl.build_shared_prefix(counter, rng, n, args.system_prompt_len, args.question_len,
                                                   args.output_len, args.num_prefixes)}
    if w == "multi-turn":
        return {"sessions": wl.build_multi_turn(counter, rng, n, args.turns, args.input_len, args.output_len,
                                                args.system_prompt_len if args.system_prompt_len_set else 0)}
    if w == "json":
        return {"sessions": wl.build_json(counter, rng, n, args.output_len)}
    victim, longs = wl.build_stall(counter, rng, args.stall_output_len, args.stall_prompts, args.stall_prompt_len)
    return {"victim": victim, "longs": longs}


def warmup_sessions(args, counter) -> list:
    rng = random.Random(args.seed + 7919)
    return [wl.Session(-1 - i, [wl.Turn(counter.text(rng, 24, lead=f"Warm-up {i}."), 4)], raw=True)
            for i in range(args.warmup_requests)]


# ---------------------------------------------------------------- runners

async def run_sessions(client, http, sessions, args, pbar) -> tuple:
    """Runs every session (its turns one after another); returns (results, duration_s)."""
    sem = asyncio.Semaphore(args.concurrency) if args.concurrency else None
    rng = random.Random(args.seed + 1)
    results = []
    t0 = time.perf_counter()

    async def one(session):
        if sem is not None:
            await sem.acquire()
        try:
            session.reset()
            for i, turn in enumerate(session.turns):
                res = wl_result(session, i)
                results.append(res)
                await client.send(http, session, turn, res, t0)
                if pbar is not None:
                    pbar.update(1)
                if not res.ok:
                    if pbar is not None and len(session.turns) > i + 1:
                        pbar.update(len(session.turns) - i - 1)
                    break
                session.history.append((turn.user, res.text))
        finally:
            if sem is not None:
                sem.release()

    tasks = []
    for session in sessions:
        if args.request_rate and math.isfinite(args.request_rate) and tasks:
            await asyncio.sleep(rng.expovariate(args.request_rate))
        tasks.append(asyncio.create_task(one(session)))
    await asyncio.gather(*tasks)
    return results, time.perf_counter() - t0


def wl_result(session, turn_index) -> Result:
    return Result(sid=session.sid, turn=turn_index, role=session.role)


async def run_stall(client, http, work, args, pbar) -> tuple:
    """One stream decodes; after it has --stall-warm-tokens tokens, --stall-prompts long prompts arrive
    --stall-interval s apart; once they are all answered and the stream has --stall-tail-tokens more
    tokens, the stream is closed (the server aborts it)."""
    victim, longs = work["victim"], work["longs"]
    t0 = time.perf_counter()
    vres = wl_result(victim, 0)
    warm, tail = asyncio.Event(), asyncio.Event()
    state = {"mark": None}

    def on_event(res):
        if res.output_tokens >= args.stall_warm_tokens:
            warm.set()
        if state["mark"] is not None and res.output_tokens >= state["mark"] + args.stall_tail_tokens:
            tail.set()

    vtask = asyncio.create_task(client.send(http, victim, victim.turns[0], vres, t0, on_event))
    waiter = asyncio.create_task(warm.wait())
    await asyncio.wait([vtask, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if vtask.done():
        raise RuntimeError(f"the decoding stream ended before {args.stall_warm_tokens} tokens: "
                           f"{vres.error or vres.finish_reason}")
    inject = time.perf_counter() - t0
    lres, ltasks = [], []
    for j, s in enumerate(longs):
        if j:
            await asyncio.sleep(args.stall_interval)
        r = wl_result(s, 0)
        lres.append(r)
        ltasks.append(asyncio.create_task(client.send(http, s, s.turns[0], r, t0)))
    for t in asyncio.as_completed(ltasks):
        await t
        if pbar is not None:
            pbar.update(1)
    longs_done = time.perf_counter() - t0
    state["mark"] = vres.output_tokens
    waiter = asyncio.create_task(tail.wait())
    await asyncio.wait([vtask, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    finished_early = vtask.done()
    if not finished_early:
        vtask.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await vtask
        vres.ok = vres.ttft is not None and vres.error is None
    if pbar is not None:
        pbar.update(1)
    duration = time.perf_counter() - t0

    times = np.array(vres.event_times)
    gaps = np.diff(times) if len(times) > 1 else np.array([])
    ends = times[1:] if len(times) > 1 else np.array([])
    starts = times[:-1] if len(times) > 1 else np.array([])
    window = gaps[(ends > inject) & (starts < longs_done)] if len(gaps) else gaps
    # baseline: mean time per token of the stream before the long prompts (events read in one network
    # read have ~0 gaps between them, so a median of event gaps would say little)
    pre = [i for i, t in enumerate(vres.event_times) if t <= inject]
    base = None
    if len(pre) > 1 and vres.event_tokens[pre[-1]] > vres.event_tokens[0]:
        base = (vres.event_times[pre[-1]] - vres.event_times[0]) / (vres.event_tokens[pre[-1]] - vres.event_tokens[0])
    stall = {
        "victim_tokens": vres.output_tokens, "victim_finished_before_long_prompts": bool(finished_early and
                                                                                    vres.event_times[-1] < longs_done),
        "inject_at_s": inject, "long_prompts_done_at_s": longs_done,
        "baseline_ms_per_token": to_ms(base), "max_gap_ms": to_ms(float(gaps.max()) if len(gaps) else None),
        "max_gap_during_long_prompts_ms": to_ms(float(window.max()) if len(window) else None),
        "gaps_during_long_prompts": int(len(window)),
        "long_prompt_tokens": [r.prompt_tokens for r in lres],
        "long_prompt_ttft_ms": [to_ms(r.ttft) for r in lres],
        "long_prompt_errors": [r.error for r in lres if r.error],
    }
    if base and stall["max_gap_during_long_prompts_ms"] is not None:
        stall["stall_factor"] = stall["max_gap_during_long_prompts_ms"] / 1000 / base
    if stall["victim_finished_before_long_prompts"]:
        print("warning: the decoding stream finished before the long prompts were answered; "
              "raise --stall-output-len", file=sys.stderr)
    return [vres] + lres, duration, stall
