"""TokenizerManager: text -> token ids, one asyncio state per request, results back from the detokenizer.

Lives in the main process (HTTP server or Engine) and never imports torch.  Create it inside a
running event loop; `generate()` is an async iterator of SGLang-shaped result dicts.
"""

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

import zmq
import zmq.asyncio

from radixlm.runtime import io_struct as io
from radixlm.runtime.generate_input import GenerateReqInput, SingleReq
from radixlm.runtime.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class _ReqState:
    req: SingleReq
    prompt_ids: list
    created: float
    text: str = ""
    output_ids: list = field(default_factory=list)
    finish_reason: Optional[dict] = None
    meta: dict = field(default_factory=dict)
    output_logprobs: list = field(default_factory=list)
    input_logprobs: Optional[list] = None
    first_token_time: Optional[float] = None
    event: asyncio.Event = field(default_factory=asyncio.Event)


class TokenizerManager:
    def __init__(self, tokenizer, server_info: dict, addrs: dict, model_name: str = "default"):
        self.tokenizer = tokenizer
        self.info = server_info
        self.context_len = server_info["context_length"]
        self.vocab_size = server_info["vocab_size"]
        self.model_name = model_name
        self.ctx = zmq.asyncio.Context()
        self.to_scheduler = self.ctx.socket(zmq.PUSH)
        self.to_scheduler.setsockopt(zmq.LINGER, 0)
        self.to_scheduler.connect(addrs["scheduler"])
        self.from_detok = self.ctx.socket(zmq.PULL)
        self.from_detok.bind(addrs["tokenizer"])
        self.states: dict = {}
        self.control_waiters: dict = {}
        self.listeners: list = []   # callbacks (state, finished) for metrics
        self.recv_task = asyncio.get_running_loop().create_task(self._recv_loop())

    # ---- requests ----
    def prepare(self, obj: GenerateReqInput) -> list:
        """Normalise, tokenize and validate every prompt; raises ValueError before anything is sent."""
        items = obj.normalize()
        if len({it.rid for it in items}) != len(items) or any(it.rid in self.states for it in items):
            raise ValueError("rid values must be unique and not already in use")
        prepared = []
        for it in items:
            ids = it.input_ids if it.input_ids is not None else self.tokenizer.encode(it.text)
            params = SamplingParams.from_dict(it.sampling_params)
            params.verify(self.vocab_size)
            self.validate_prompt(ids)
            if it.logprob_start_len >= max(len(ids), 1) and it.return_logprob:
                raise ValueError(f"logprob_start_len ({it.logprob_start_len}) must be less than the prompt "
                                 f"length ({len(ids)})")
            prepared.append((it, ids, params))
        return prepared

    def validate_prompt(self, ids) -> None:
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.context_len:
            raise ValueError(f"the prompt has {len(ids)} tokens, which does not fit this model's context "
                             f"length of {self.context_len} tokens")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")

    async def generate_one(self, item: SingleReq, ids: list, params: SamplingParams):
        """Async iterator over cumulative results of one prompt (every step when streaming, else once)."""
        if params.n > 1:
            async for out in self._generate_n(item, ids, params):
                yield out
            return
        state = _ReqState(item, ids, time.time())
        self.states[item.rid] = state
        sp = params.to_dict()
        self._send(io.TokenizedGenerateReq(item.rid, ids, sp, item.return_logprob, item.logprob_start_len,
                                           item.top_logprobs_num, item.stream))
        try:
            while True:
                await state.event.wait()
                state.event.clear()
                if state.finish_reason is not None:
                    yield self._result(state)
                    return
                if item.stream:
                    yield self._result(state)
        finally:
            if state.finish_reason is None:
                self.abort(item.rid)
            self.states.pop(item.rid, None)

    async def _generate_n(self, item, ids, params):
        """n samples of one prompt: cache the prompt once, then run the n requests together."""
        warm = SingleReq(item.rid + "-prefix", None, ids, {**item.sampling_params, "max_new_tokens": 0, "n": 1})
        async for _ in self.generate_one(warm, ids, SamplingParams.from_dict(warm.sampling_params)):
            pass
        subs = []
        for i in range(params.n):
            sp = {**item.sampling_params, "n": 1}
            sub = SingleReq(f"{item.rid}-{i}", item.text, ids, sp, item.return_logprob, item.logprob_start_len,
                            item.top_logprobs_num, item.return_text_in_logprobs, False)
            subs.append(self._collect(sub, ids, SamplingParams.from_dict(sp)))
        results = await asyncio.gather(*subs)
        for i, r in enumerate(results):
            r["index"] = i
        yield results

    async def _collect(self, item, ids, params):
        last = None
        async for out in self.generate_one(item, ids, params):
            last = out
        return last

    def abort(self, rid: str) -> None:
        if rid in self.states:
            self._send(io.AbortReq(rid))

    # ---- control ----
    async def control(self, msg, kind: str, timeout: float = 30.0):
        fut = asyncio.get_running_loop().create_future()
        self.control_waiters.setdefault(kind, []).append(fut)
        self._send(msg)
        return await asyncio.wait_for(fut, timeout)

    async def flush_cache(self):
        return await self.control(io.FlushCacheReq(), "flush_cache")

    async def get_server_info(self) -> dict:
        out = await self.control(io.GetServerInfoReq(), "server_info")
        return {**self.info, **out.info}

    def _send(self, msg) -> None:
        self.to_scheduler.send(io.encode(msg), copy=False)

    # ---- results ----
    async def _recv_loop(self) -> None:
        while True:
            data = await self.from_detok.recv()
            try:
                msg = io.decode(data, "tokenizer")
                if isinstance(msg, io.ControlOut):
                    waiters = self.control_waiters.get(msg.kind) or []
                    if waiters:
                        fut = waiters.pop(0)
                        if not fut.done():
                            fut.set_result(msg)
                    continue
                self._apply(msg)
            except Exception:
                logger.exception("bad message from the detokenizer")

    def _apply(self, msg: io.BatchStrOut) -> None:
        now = time.time()
        for i, rid in enumerate(msg.rids):
            state = self.states.get(rid)
            if state is None:
                continue
            state.text += msg.text_deltas[i]
            state.output_ids.extend(msg.new_token_ids[i])
            if msg.new_token_ids[i] and state.first_token_time is None:
                state.first_token_time = now
            state.meta = {"prompt_tokens": msg.prompt_tokens[i], "completion_tokens": msg.completion_tokens[i],
                          "cached_tokens": msg.cached_tokens[i], "forward_passes": msg.forward_passes[i]}
            if msg.output_logprobs[i]:
                state.output_logprobs.extend(msg.output_logprobs[i])
            if msg.input_logprobs[i] is not None:
                state.input_logprobs = msg.input_logprobs[i]
            state.finish_reason = msg.finish_reasons[i]
            for listener in self.listeners:
                listener(state, msg.new_token_ids[i], now)
            state.event.set()

    def _result(self, state: _ReqState) -> dict:
        item = state.req
        meta = {"id": item.rid, "finish_reason": state.finish_reason, **state.meta,
                "e2e_latency": time.time() - state.created}
        if not state.meta:
            meta.update(prompt_tokens=len(state.prompt_ids), completion_tokens=0, cached_tokens=0, forward_passes=0)
        if item.return_logprob:
            meta.update(self._logprob_meta(state))
        return {"text": state.text, "output_ids": list(state.output_ids), "meta_info": meta}

    def _logprob_meta(self, state) -> dict:
        with_text = state.req.return_text_in_logprobs

        def triple(lp, tid):
            return [lp, tid, self.tokenizer.decode([tid]) if with_text else None]

        def tops(top):
            return [triple(lp, tid) for lp, tid in top] if top else None

        inputs = state.input_logprobs or []
        outputs = state.output_logprobs
        return {
            "input_token_logprobs": [triple(lp, tid) for lp, tid, _ in inputs],
            "input_top_logprobs": [tops(top) for _, _, top in inputs],
            "output_token_logprobs": [triple(lp, tid) for lp, tid, _ in outputs],
            "output_top_logprobs": [tops(top) for _, _, top in outputs],
        }

    def close(self) -> None:
        self.recv_task.cancel()
        self.to_scheduler.close(0)
        self.from_detok.close(0)
        self.ctx.term()


def new_rid() -> str:
    return uuid.uuid4().hex
