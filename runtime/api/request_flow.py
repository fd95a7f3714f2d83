"""run_generate: one GenerateReqInput (single or batch, streaming or not) through the TokenizerManager.

Yields cumulative results: a dict for a single prompt, a list of dicts for a batch or n > 1.
Raises ValueError for bad input, before anything reaches the scheduler, and APIError (with the
scheduler's status: 400 refused, 500 internal error, 503 out of memory or shutting down) for a
request that failed after it was sent.  A request aborted on purpose (/abort_request, status 499)
is not an error: its result carries the abort finish_reason.
"""

import asyncio

from radixlm.runtime.api.errors import APIError


def raise_if_failed(out) -> None:
    for item in out if isinstance(out, list) else [out]:
        reason = item["meta_info"].get("finish_reason") or {}
        status = reason.get("status_code") or 500
        if reason.get("type") == "abort" and status != 499:
            message = reason.get("message") or "the request failed"
            code = "service_unavailable" if status == 503 else None
            raise APIError(status if 400 <= status < 600 else 500, message, code=code)


async def run_generate(tm, obj, caller=None):
    """caller: the client_scope.Caller (its key scopes rids and, isolated, the cache); None: no keys."""
    prepared = await tm.prepare(obj, caller)
    try:
        async for out in _run(tm, obj, prepared):
            yield out
    finally:
        tm.release(prepared)


async def _run(tm, obj, prepared):
    if not obj.is_batch and len(prepared) == 1:
        async for out in tm.generate_one(prepared[0]):
            raise_if_failed(out)
            yield out
        return
    streams = [tm.generate_one(p) for p in prepared]
    if obj.stream:
        latest = [None] * len(streams)
        async for i, out in _merge(streams):
            raise_if_failed(out)
            latest[i] = out
            yield [x for x in latest]
        return
    results = await asyncio.gather(*[_last(s) for s in streams])
    flat = []
    for r in results:
        flat.extend(r if isinstance(r, list) else [r])
    raise_if_failed(flat)
    yield flat


async def _last(stream):
    last = None
    async for out in stream:
        last = out
    return last


async def _merge(streams):
    q: asyncio.Queue = asyncio.Queue()
    done = object()

    async def drain(i, s):
        try:
            async for out in s:
                await q.put((i, out))
        finally:
            await q.put((i, done))

    tasks = [asyncio.create_task(drain(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            i, out = await q.get()
            if out is done:
                remaining -= 1
                continue
            yield i, out
    finally:
        for t in tasks:
            t.cancel()
