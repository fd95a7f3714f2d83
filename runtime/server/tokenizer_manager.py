"""TokenizerManager: text -> token ids, one asyncio state per request, results back from the detokenizer.

Lives in the main process (HTTP server or Engine) and never imports torch.  Create it inside a
running event loop; `generate()` is an async iterator of SGLang-shaped result dicts.  With several
scheduler replicas (--dp-size), a DpRouter picks each request's replica, an abort goes to the replica
that holds the request, and control requests go to every replica (their replies merged).
"""

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional, Union

import msgspec
import zmq
import zmq.asyncio

from radixlm.constrained.output_check import check_finished_output
from radixlm.runtime import io_struct as io
from radixlm.runtime.api.client_scope import Caller
from radixlm.runtime.api.generate_input import GenerateReqInput, SingleReq
from radixlm.runtime.dp.control import merge_replies
from radixlm.runtime.dp.router import DpRouter
from radixlm.runtime.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


MAX_TOP_LOGPROBS = 64             # alternatives per position (OpenAI allows 20)
MAX_LOGPROB_ENTRIES = 200_000     # positions x (1 + alternatives) one request may return
CHARS_PER_TOKEN = 32              # no real token is longer: a longer prompt cannot fit the context
INLINE_TOKENIZE_CHARS = 4096      # shorter prompts are tokenized on the loop (a thread hop costs more)
HEAVY_RENDER_ENTRIES = 4096       # logprob entries still to render above which a result waits its turn
_NIL = msgspec.Raw(b"\xc0")        # msgpack's nil


def _lazy_decoder() -> msgspec.msgpack.Decoder:
    """A decoder for the detokenizer's messages that leaves each request's input logprobs as raw
    msgpack (msgspec.Raw): decoding them all in one call held the event loop (and every stream) for a
    second; each request's own task decodes its part when it renders its result (_logprob_meta)."""
    return msgspec.msgpack.Decoder(Union[io.with_raw_field(io.BatchStrOut, "input_logprobs"), io.ControlOut])


_FROM_DETOKENIZER = _lazy_decoder()


@dataclass
class Prepared:
    """One prompt ready to send.  item.rid is the client's label (shown back in meta_info.id); iid is
    the server-made id that the scheduler, the detokenizer and aborts know it by."""
    item: SingleReq
    ids: list
    params: SamplingParams
    iid: str
    owner: Optional[int] = None     # the caller's API key index: client rids are labels within it


@dataclass
class _ReqState:
    req: SingleReq
    prompt_ids: list
    created: float
    owner: Optional[int] = None
    text: str = ""
    output_ids: list = field(default_factory=list)
    finish_reason: Optional[dict] = None
    meta: dict = field(default_factory=dict)
    output_logprobs: list = field(default_factory=list)
    input_logprobs: Optional[list] = None
    first_token_time: Optional[float] = None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    rendered: dict = field(default_factory=dict)   # logprob lists rendered so far (rendered once each)


class TokenizerManager:
    def __init__(self, tokenizer, server_info: dict, addrs: dict, model_name: str = "default"):
        self.tokenizer = tokenizer
        self.info = server_info
        self.context_len = server_info["context_length"]
        self.vocab_size = server_info["vocab_size"]
        self.kv_tokens = server_info.get("max_total_num_tokens")
        self.model_name = model_name
        self.ctx = zmq.asyncio.Context()
        self.to_replicas = []           # one PUSH socket per scheduler replica
        for addr in addrs.get("replicas") or [addrs["scheduler"]]:
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(addr)
            self.to_replicas.append(sock)
        self.router = DpRouter.from_info(server_info) if len(self.to_replicas) > 1 else None
        self.from_detok = self.ctx.socket(zmq.PULL)
        self.from_detok.bind(addrs["tokenizer"])
        self.states: dict = {}          # internal id -> _ReqState
        self.labels: set = set()        # (owner, client rid) of requests in flight
        self.control_waiters: dict = {}
        self.listeners: list = [check_finished_output]   # callbacks (state, new ids, now): output checks, metrics
        self.last_message = time.monotonic()   # when the detokenizer last sent anything
        self.closed = False
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="radixlm-tokenize")
        self._render_lock = asyncio.Lock()      # heavy logprob results render one at a time (_render)
        self.recv_task = asyncio.get_running_loop().create_task(self._recv_loop())

    # ---- requests ----
    async def run_blocking(self, fn, *args):
        """fn(*args) on the tokenizer thread, so the event loop keeps serving."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    @property
    def sequence_limit(self) -> int:
        """The longest prompt + output one request can reach: the context, or the KV cache if smaller."""
        return min(self.context_len, self.kv_tokens or self.context_len)

    @property
    def max_prompt_chars(self) -> int:
        return self.context_len * CHARS_PER_TOKEN

    def check_prompt_chars(self, text: str) -> None:
        """Refuse, before tokenizing, a text too long to fit the context whatever its tokens."""
        if len(text) > self.max_prompt_chars:
            raise ValueError(f"the prompt has {len(text)} characters; this server refuses prompts over "
                             f"{self.max_prompt_chars} characters (context length {self.context_len} tokens x "
                             f"{CHARS_PER_TOKEN}) before tokenizing")

    async def encode(self, texts: list, **kw) -> list:
        """Token ids of each text, off the loop unless they are short."""
        for t in texts:
            self.check_prompt_chars(t)
        if sum(len(t) for t in texts) <= INLINE_TOKENIZE_CHARS:
            return [self.tokenizer.encode(t, **kw) for t in texts]
        return await self.run_blocking(lambda: [self.tokenizer.encode(t, **kw) for t in texts])

    async def prepare(self, obj: GenerateReqInput, caller: Optional[Caller] = None) -> list:
        """Normalise, tokenize and validate every prompt, and reserve the client rids (within the
        caller's key); raises ValueError before anything is sent.  The caller must release(prepared)
        once the request is over."""
        caller = caller or Caller()
        items = obj.normalize()
        for it in items:
            it.cache_namespace = caller.namespace(it.cache_namespace)
        texts = [it.text for it in items if it.input_ids is None]
        encoded = iter(await self.encode(texts))
        prepared = []
        for it in items:
            ids = it.input_ids if it.input_ids is not None else next(encoded)
            params = it.params if it.params is not None else SamplingParams.from_dict(it.sampling_params)
            params.verify(self.vocab_size)
            self.validate_prompt(ids)
            self._check_request(it, ids, params)
            prepared.append(Prepared(it, ids, params, uuid.uuid4().hex, caller.key))
        self._reserve([(caller.key, p.item.rid) for p in prepared])
        return prepared

    def _reserve(self, labels: list) -> None:
        busy = sorted(rid for _, rid in set(labels) & self.labels)
        if busy:
            raise ValueError(f"rid {busy[0]!r} is already in use by a request in flight; give each request "
                             f"its own rid (or none)")
        self.labels.update(labels)

    def release(self, prepared: list) -> None:
        """The request is over: its client rids may be used again."""
        for p in prepared:
            self.labels.discard((p.owner, p.item.rid))

    def validate_prompt(self, ids) -> None:
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) >= self.context_len:
            raise ValueError(f"the prompt has {len(ids)} tokens, which does not fit this model's context "
                             f"length of {self.context_len} tokens")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")

    def _check_request(self, it: SingleReq, ids: list, params: SamplingParams) -> None:
        """Refuse what cannot be served: logprob_start_len past the prompt, more KV than the cache
        holds even alone, a logprob response too large to build."""
        if it.logprob_start_len >= max(len(ids), 1) and it.return_logprob:
            raise ValueError(f"logprob_start_len ({it.logprob_start_len}) must be less than the prompt "
                             f"length ({len(ids)})")
        need = min(len(ids) + params.max_new_tokens, self.context_len)   # generation stops at the context
        if self.kv_tokens is not None and need > self.kv_tokens:
            raise ValueError(f"the prompt ({len(ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) "
                             f"needs {need} KV cache slots, but the KV cache holds only {self.kv_tokens} tokens "
                             f"even with nothing else running; lower max_new_tokens")
        if it.top_logprobs_num > MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs_num must be at most {MAX_TOP_LOGPROBS}, got {it.top_logprobs_num}")
        if it.return_logprob:
            positions = params.max_new_tokens + (len(ids) - it.logprob_start_len if it.logprob_start_len >= 0
                                                 else 0)
            entries = positions * (1 + it.top_logprobs_num) * max(params.n, 1)
            if entries > MAX_LOGPROB_ENTRIES:
                raise ValueError(f"the response would carry {entries} logprob entries (positions x (1 + "
                                 f"top_logprobs_num) x n); at most {MAX_LOGPROB_ENTRIES}: lower "
                                 f"top_logprobs_num, max_new_tokens or raise logprob_start_len")

    async def generate_one(self, p: Prepared):
        """Async iterator over cumulative results of one prompt (every step when streaming, else once)."""
        item = p.item
        if p.params.n > 1:
            async for out in self._generate_n(p):
                yield out
            return
        state = _ReqState(item, p.ids, time.time(), p.owner)
        self.states[p.iid] = state
        replica = self.router.route(p.iid, p.ids, item.cache_namespace) if self.router else 0
        self._send(io.TokenizedGenerateReq(p.iid, p.ids, p.params.to_dict(), item.return_logprob,
                                           item.logprob_start_len, item.top_logprobs_num, item.stream,
                                           item.cache_namespace), replica)
        try:
            while True:
                await state.event.wait()
                state.event.clear()
                if state.finish_reason is not None:
                    yield await self._render(state)
                    return
                if item.stream:
                    yield await self._render(state)
        finally:
            if state.finish_reason is None:
                self.abort(p.iid)
            self.states.pop(p.iid, None)
            if self.router:
                self.router.finish(p.iid, p.ids + state.output_ids[:-1])   # what its replica caches

    async def _generate_n(self, p: Prepared):
        """n samples of one prompt: cache the prompt once, then run the n requests together."""
        item, ids = p.item, p.ids
        warm_sp = {**item.sampling_params, "max_new_tokens": 0, "n": 1}
        warm = SingleReq(item.rid + "-prefix", None, ids, warm_sp, cache_namespace=item.cache_namespace,
                         log_metrics=item.log_metrics)
        warm_p = Prepared(warm, ids, SamplingParams.from_dict(warm_sp), p.iid + "-prefix", p.owner)
        async for _ in self.generate_one(warm_p):
            pass
        subs = []
        for i in range(p.params.n):
            sp = {**item.sampling_params, "n": 1}
            sub = SingleReq(f"{item.rid}-{i}", item.text, ids, sp, item.return_logprob, item.logprob_start_len,
                            item.top_logprobs_num, item.return_text_in_logprobs, False, item.cache_namespace,
                            item.log_metrics)
            subs.append(self._collect(Prepared(sub, ids, SamplingParams.from_dict(sp), f"{p.iid}-{i}", p.owner)))
        results = await asyncio.gather(*subs)
        for i, r in enumerate(results):
            r["index"] = i
        yield results

    async def _collect(self, p: Prepared):
        last = None
        async for out in self.generate_one(p):
            last = out
        return last

    def abort(self, iid: str) -> None:
        if iid in self.states:
            replica = self.router.replica_of(iid) if self.router else None
            self._send(io.AbortReq(iid), replica or 0)

    def abort_label(self, label: Optional[str], owner: Optional[int] = None) -> list:
        """Abort owner's requests that a client rid names (with its n > 1 parts), or all of owner's when
        label is None; returns the client rids aborted."""
        hit = []
        for iid, state in list(self.states.items()):
            if state.owner != owner:
                continue
            rid = state.req.rid
            tail = rid[len(label) + 1:] if label is not None and rid.startswith(label + "-") else None
            if label is None or rid == label or (tail is not None and (tail.isdigit() or tail == "prefix")):
                self.abort(iid)
                hit.append(rid)
        return hit

    def fail_pending(self, message: str, status: int = 503) -> None:
        """End every waiting request with this error: nothing will answer them any more."""
        for state in list(self.states.values()):
            if state.finish_reason is None:
                state.finish_reason = {"type": "abort", "message": message, "status_code": status}
                state.event.set()

    # ---- control ----
    async def control(self, msg, kind: str, timeout: float = 30.0):
        """Send msg to every replica and wait for all their replies (ControlOut), merged into one."""
        return merge_replies(kind, await self._control_all(msg, kind, timeout))

    async def _control_all(self, msg, kind: str, timeout) -> list:
        loop = asyncio.get_running_loop()
        futs = []
        for replica in range(len(self.to_replicas)):
            futs.append(loop.create_future())
            self.control_waiters.setdefault((kind, replica), []).append(futs[-1])
            self._send(msg, replica)
        return await asyncio.wait_for(asyncio.gather(*futs), timeout)

    async def flush_cache(self):
        outs = await self._control_all(io.FlushCacheReq(), "flush_cache", 30.0)
        for out in outs:
            if self.router and out.success:
                self.router.flush(out.replica)
        return merge_replies("flush_cache", outs)

    async def get_server_info(self) -> dict:
        out = await self.control(io.GetServerInfoReq(), "server_info")
        return {**self.info, **out.info}

    def _send(self, msg, replica: int = 0) -> None:
        if not self.closed:
            self.to_replicas[replica].send(io.encode(msg), copy=False)

    # ---- results ----
    async def _recv_loop(self) -> None:
        while True:
            data = await self.from_detok.recv()
            self.last_message = time.monotonic()
            try:
                msg = _FROM_DETOKENIZER.decode(data)
                if isinstance(msg, io.ControlOut):
                    waiters = self.control_waiters.get((msg.kind, msg.replica)) or []
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
            disk = msg.disk_cached_tokens[i] if msg.disk_cached_tokens else None
            host = msg.host_cached_tokens[i] if msg.host_cached_tokens else None
            if disk is not None or host is not None:   # SGLang's field where KV has tiers besides the device
                disk, host = disk or 0, host or 0
                state.meta["cached_tokens_details"] = {"device": msg.cached_tokens[i] - disk - host, "host": host,
                                                       "disk": disk}
            spec = msg.spec_stats[i] if msg.spec_stats else None
            if spec is not None:   # SGLang's fields: verify passes, and tokens per verify pass
                verify_ct, accepted = spec
                state.meta["spec_verify_ct"] = verify_ct
                state.meta["spec_accept_length"] = (verify_ct + accepted) / verify_ct if verify_ct else 0.0
            if msg.output_logprobs[i]:
                state.output_logprobs.extend(msg.output_logprobs[i])
            if msg.input_logprobs[i] != _NIL:
                state.input_logprobs = msg.input_logprobs[i]        # raw: decoded by _logprob_meta
            state.finish_reason = msg.finish_reasons[i]
            for listener in self.listeners:
                listener(state, msg.new_token_ids[i], now)
            state.event.set()

    async def _render(self, state: _ReqState) -> dict:
        """_result, with heavy logprob rendering taken one result per loop iteration: the n parts of a
        request (or several requests) whose logprobs arrive in one message would otherwise render back
        to back in one iteration, and no stream's tokens nor /health would be served until all were done."""
        if not self._heavy(state):
            return self._result(state)
        async with self._render_lock:
            await asyncio.sleep(0)          # the loop polls its sockets before each heavy render
            return self._result(state)

    @staticmethod
    def _heavy(state: _ReqState) -> bool:
        if not state.req.return_logprob:
            return False
        pending = len(state.output_logprobs) - len(state.rendered.get("output_token_logprobs", ()))
        return isinstance(state.input_logprobs, msgspec.Raw) or \
            pending * (1 + state.req.top_logprobs_num) > HEAVY_RENDER_ENTRIES

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
        """SGLang's logprob lists; each entry is rendered once (a stream re-sends them cumulatively)."""
        with_text = state.req.return_text_in_logprobs
        if isinstance(state.input_logprobs, msgspec.Raw):     # in this request's task (_lazy_decoder)
            state.input_logprobs = msgspec.msgpack.decode(state.input_logprobs)

        def triple(lp, tid):
            return [lp, tid, self.tokenizer.decode([tid]) if with_text else None]

        def tops(top):
            return [triple(lp, tid) for lp, tid in top] if top else None

        r = state.rendered
        if not r or (state.input_logprobs is not None and r["source"] is not state.input_logprobs):
            inputs = state.input_logprobs or []
            r.update(source=state.input_logprobs, input_token_logprobs=[triple(lp, tid) for lp, tid, _ in inputs],
                     input_top_logprobs=[tops(top) for _, _, top in inputs])
            r.setdefault("output_token_logprobs", [])
            r.setdefault("output_top_logprobs", [])
        done = r["output_token_logprobs"]
        for lp, tid, top in state.output_logprobs[len(done):]:
            done.append(triple(lp, tid))
            r["output_top_logprobs"].append(tops(top))
        return {k: list(v) for k, v in r.items() if k != "source"}

    def close(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.recv_task.cancel()
        for sock in self.to_replicas:
            sock.close(0)
        self.from_detok.close(0)
        self.ctx.term()


def new_rid() -> str:
    return uuid.uuid4().hex
