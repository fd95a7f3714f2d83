"""run_generate: one GenerateReqInput (single or batch, streaming or not) through the TokenizerManager.

Yields cumulative results: a dict for a single prompt, a list of dicts for a batch or n > 1.
Raises ValueError for bad input, before anything reaches the scheduler, and for requests the
scheduler refused (finish_reason abort with a 4xx status).
"""

import asyncio


def raise_if_refused(out) -> None:
    for item in out if isinstance(out, list) else [out]:
        reason = item["meta_info"].get("finish_reason") or {}
        if reason.get("type") == "abort" and 400 <= reason.get("status_code", 0) < 500 and reason.get("status_code") != 499:
            raise ValueError(reason.get("message", "request refused"))


async def run_generate(tm, obj):
    prepared = tm.prepare(obj)
    if not obj.is_batch and len(prepared) == 1:
        item, ids, params = prepared[0]
        async for out in tm.generate_one(item, ids, params):
            raise_if_refused(out)
            yield out
        return
    streams = [tm.generate_one(item, ids, params) for item, ids, params in prepared]
    if obj.stream:
        latest = [None] * len(streams)
        async for i, out in _merge(streams):
            raise_if_refused(out)
            latest[i] = out
            yield [x for x in latest]
        return
    results = await asyncio.gather(*[_last(s) for s in streams])
    flat = []
    for r in results:
        flat.extend(r if isinstance(r, list) else [r])
    raise_if_refused(flat)
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
