"""Engine: the offline entry point, same processes as the server minus HTTP.

    with Engine(model="smollm2-135m-instruct", dtype="float32") as engine:
        out = engine.generate("The capital of France is", {"max_new_tokens": 16, "temperature": 0})

The TokenizerManager runs on a private event loop in a background thread, so generate() works from
plain scripts and async_generate() from any running loop.
"""

import asyncio
import queue
import threading

from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.api.request_flow import run_generate
from radixlm.runtime.server.launch import launch_backend
from radixlm.runtime.server.tokenizer_manager import TokenizerManager
from radixlm.runtime.server_args import ServerArgs

_END = object()


class Engine:
    def __init__(self, model: str = None, **options):
        if model is not None:
            options["model"] = model
        self.args = ServerArgs.from_kwargs(**options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="radixlm-engine")
        self._thread.start()
        self.backend = None
        try:
            self.backend = launch_backend(self.args)
            from transformers import AutoTokenizer

            from radixlm.runtime.models.multimodal_text import processor_chat_template
            self.tokenizer = AutoTokenizer.from_pretrained(self.backend.info["model_path"], trust_remote_code=False)
            if not getattr(self.tokenizer, "chat_template", None):   # a vision-language folder's processor may hold it
                self.tokenizer.chat_template = processor_chat_template(self.backend.info["model_path"])
            self.tokenizer_manager = self._call(self._make_manager())
        except BaseException:
            self.shutdown()
            raise

    async def _make_manager(self):
        return TokenizerManager(self.tokenizer, self.backend.info, self.backend.addrs)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _request(self, prompt, sampling_params, input_ids, stream, **kw) -> GenerateReqInput:
        if self.backend is None:
            raise RuntimeError("the engine is shut down")
        dead = self.backend.dead_child()
        if dead:
            raise RuntimeError(f"the {dead} process has exited")
        return GenerateReqInput(text=prompt, input_ids=input_ids, sampling_params=sampling_params, stream=stream,
                                **{k: v for k, v in kw.items() if v is not None})

    # ---- generation ----
    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=None,
                 logprob_start_len=None, top_logprobs_num=None, return_text_in_logprobs=None, rid=None,
                 stream: bool = False):
        """A dict per prompt (a list for a list of prompts); with stream=True an iterator of dicts."""
        obj = self._request(prompt, sampling_params, input_ids, stream, return_logprob=return_logprob,
                            logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num,
                            return_text_in_logprobs=return_text_in_logprobs, rid=rid)
        if stream:
            return self._stream_sync(obj)
        return self._call(self._final(obj))

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=None,
                             logprob_start_len=None, top_logprobs_num=None, return_text_in_logprobs=None,
                             rid=None, stream: bool = False):
        """Awaitable result, or (stream=True) an async iterator of cumulative results."""
        obj = self._request(prompt, sampling_params, input_ids, stream, return_logprob=return_logprob,
                            logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num,
                            return_text_in_logprobs=return_text_in_logprobs, rid=rid)
        if stream:
            return self._stream_async(obj)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._final(obj), self._loop))

    async def _final(self, obj):
        last = None
        async for out in run_generate(self.tokenizer_manager, obj):
            last = out
        return last

    def _stream_sync(self, obj):
        q: queue.Queue = queue.Queue()
        fut = asyncio.run_coroutine_threadsafe(self._pump(obj, q.put), self._loop)
        try:
            while True:
                item = q.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            fut.cancel()

    async def _stream_async(self, obj):
        q: asyncio.Queue = asyncio.Queue()
        user_loop = asyncio.get_running_loop()
        fut = asyncio.run_coroutine_threadsafe(
            self._pump(obj, lambda item: user_loop.call_soon_threadsafe(q.put_nowait, item)), self._loop)
        try:
            while True:
                item = await q.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            fut.cancel()

    async def _pump(self, obj, put):
        try:
            async for out in run_generate(self.tokenizer_manager, obj):
                put(out)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            put(_END)

    # ---- control ----
    def flush_cache(self) -> dict:
        out = self._call(self.tokenizer_manager.flush_cache())
        return {"success": out.success, "message": out.message}

    def get_server_info(self) -> dict:
        return {**self.args.__dict__, **self._call(self.tokenizer_manager.get_server_info())}

    def shutdown(self) -> None:
        if getattr(self, "tokenizer_manager", None) is not None:
            self._loop.call_soon_threadsafe(self.tokenizer_manager.close)
            self.tokenizer_manager = None
        if self.backend is not None:
            self.backend.stop()
            self.backend = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
