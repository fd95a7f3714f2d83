"""Backends: what a program's state calls to run model requests.

A backend exposes `tokenizer` (the HF tokenizer the runtime uses, with its chat template) and
`generate(text=None, input_ids=None, sampling_params=None, return_logprob=False, logprob_start_len=-1)`
with the SGLang-native semantics: a dict for one prompt, a list of dicts for a list of prompts, each
{"text", "output_ids", "meta_info"}.  `generate_stream(...)` takes the same arguments for one prompt and
yields cumulative results of that shape as tokens arrive, the last one final.  All are safe to call from
many threads at once.

    EngineBackend(engine)                   the in-process radixlm Engine
    RuntimeEndpoint("http://host:port")     a radixlm or SGLang server over POST /generate
"""

import json
import threading
from typing import Optional

_default = {"backend": None}
_default_lock = threading.Lock()


class BaseBackend:
    tokenizer = None

    def generate(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                 logprob_start_len=-1):
        raise NotImplementedError

    def generate_stream(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                        logprob_start_len=-1):
        """Cumulative results as they arrive; a backend that cannot stream gives the final one only."""
        yield self.generate(text=text, input_ids=input_ids, sampling_params=sampling_params,
                            return_logprob=return_logprob, logprob_start_len=logprob_start_len)

    def cache_prefix(self, text=None, input_ids=None) -> None:
        """Compute and cache a prompt prefix without generating (max_new_tokens=0)."""
        self.generate(text=text, input_ids=input_ids, sampling_params={"max_new_tokens": 0})


class EngineBackend(BaseBackend):
    def __init__(self, engine):
        self.engine = engine
        self.tokenizer = engine.tokenizer

    def generate(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                 logprob_start_len=-1, stream=False):
        return self.engine.generate(prompt=text, input_ids=input_ids, sampling_params=sampling_params,
                                    return_logprob=return_logprob or None,
                                    logprob_start_len=logprob_start_len if return_logprob else None,
                                    stream=stream)

    def generate_stream(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                        logprob_start_len=-1):
        yield from self.generate(text, input_ids, sampling_params, return_logprob, logprob_start_len, stream=True)

    def get_server_info(self) -> dict:
        return self.engine.get_server_info()


class RuntimeEndpoint(BaseBackend):
    """A server speaking SGLang's native API: /generate, /get_model_info (tokenizer_path)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 600.0):
        import requests
        from transformers import AutoTokenizer

        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.incremental = None
        info = self._get("/get_model_info")
        self.model_info = info
        self.tokenizer = AutoTokenizer.from_pretrained(info.get("tokenizer_path") or info["model_path"], trust_remote_code=False)

    def _get(self, path):
        r = self.session.get(self.base_url + path, headers=self.headers, timeout=self.timeout)
        r.raise_for_status()
        return r.json()

    def _generate_body(self, text, input_ids, sampling_params, return_logprob, logprob_start_len) -> dict:
        body = {"sampling_params": sampling_params or {}}
        if text is not None:
            body["text"] = text
        else:
            body["input_ids"] = input_ids
        if return_logprob:
            body.update(return_logprob=True, logprob_start_len=logprob_start_len)
        return body

    def generate(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                 logprob_start_len=-1):
        body = self._generate_body(text, input_ids, sampling_params, return_logprob, logprob_start_len)
        r = self.session.post(self.base_url + "/generate", json=body, headers=self.headers, timeout=self.timeout)
        if r.status_code != 200:
            raise RuntimeError(f"/generate answered {r.status_code}: {r.text[:500]}")
        return r.json()

    def _incremental(self) -> bool:
        """Whether the server streams text deltas (--incremental-streaming-output) or cumulative text."""
        if self.incremental is None:
            self.incremental = bool(self._get("/get_server_info").get("incremental_streaming_output", False))
        return self.incremental

    def generate_stream(self, text=None, input_ids=None, sampling_params=None, return_logprob=False,
                        logprob_start_len=-1):
        """POST /generate with "stream": true; its server-sent events are `data: {result}` lines, or
        `data: {"error": ...}`, and end with `data: [DONE]`.  Events carry SGLang's streaming shape
        (output logprobs as per-event deltas; text cumulative, or deltas on an incremental server);
        this yields cumulative results."""
        merge = _StreamMerge(self._incremental())
        body = self._generate_body(text, input_ids, sampling_params, return_logprob, logprob_start_len)
        body["stream"] = True
        with self.session.post(self.base_url + "/generate", json=body, headers=self.headers,
                               timeout=self.timeout, stream=True) as r:
            if r.status_code != 200:
                raise RuntimeError(f"/generate answered {r.status_code}: {r.text[:500]}")
            for line in r.iter_lines():
                if not line.startswith(b"data:"):
                    continue
                data = line[len(b"data:"):].strip()
                if data == b"[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"/generate stream failed: {event['error'].get('message')}")
                yield merge.add(event)
        raise RuntimeError("/generate stream ended without [DONE]")

    def get_server_info(self) -> dict:
        return self._get("/get_server_info")


class _StreamMerge:
    """Rebuilds cumulative results from SGLang-shaped stream events."""

    DELTA_KEYS = ("output_token_logprobs", "output_top_logprobs")

    def __init__(self, incremental: bool):
        self.incremental = incremental
        self.text, self.ids, self.lists = "", [], {}

    def add(self, event: dict) -> dict:
        meta = dict(event.get("meta_info") or {})
        for key in self.DELTA_KEYS:
            if key in meta:
                meta[key] = self.lists.setdefault(key, []) + list(meta[key] or [])
                self.lists[key] = meta[key]
        if self.incremental:
            self.text += event.get("text", "")
            self.ids = self.ids + list(event.get("output_ids", []))
        else:
            self.text, self.ids = event.get("text", ""), list(event.get("output_ids", []))
        return {**event, "text": self.text, "output_ids": self.ids, "meta_info": meta}


def as_backend(obj) -> BaseBackend:
    """A backend from a backend or a radixlm Engine."""
    if isinstance(obj, BaseBackend):
        return obj
    if hasattr(obj, "tokenizer_manager") and hasattr(obj, "generate"):
        return EngineBackend(obj)
    raise TypeError(f"not a backend: {obj!r} (give an Engine, EngineBackend or RuntimeEndpoint)")


def set_default_backend(backend) -> None:
    with _default_lock:
        _default["backend"] = None if backend is None else as_backend(backend)


def get_default_backend() -> Optional[BaseBackend]:
    return _default["backend"]
