"""Per-request records and the clients that stream one request in the SGLang-native or an OpenAI API shape
(bench/serving.py)."""

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import aiohttp
import numpy as np
import serving_workloads as wl

# ---------------------------------------------------------------- per-request record

@dataclass
class Result:
    sid: int
    turn: int
    role: str = "main"
    ok: bool = False
    error: Optional[str] = None
    status: Optional[int] = None
    start: float = 0.0               # seconds since the run started
    ttft: Optional[float] = None     # seconds
    e2e: Optional[float] = None      # seconds
    prompt_tokens: Optional[int] = None
    output_tokens: int = 0
    cached_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    itls: list = field(default_factory=list)         # seconds, one per token after the first
    event_times: list = field(default_factory=list)  # seconds since the run started, events with tokens
    event_tokens: list = field(default_factory=list)  # output tokens so far at each of those events
    text: str = ""
    json_valid: Optional[bool] = None
    cancelled: bool = False          # closed by the benchmark on purpose (long-prompt-stall victim)

    @property
    def tpot(self) -> Optional[float]:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_json(self, keep_text: bool) -> dict:
        d = asdict(self)
        d["tpot"] = self.tpot
        d.pop("event_times")
        d.pop("event_tokens")
        if not keep_text:
            d.pop("text")
        d["max_gap"] = max(np.diff(self.event_times)) if len(self.event_times) > 1 else None
        d["itls"] = [round(x, 6) for x in self.itls]
        return d


# ---------------------------------------------------------------- backends

class Client:
    """Builds and streams one request of a session turn for the chosen API shape."""

    def __init__(self, args, base_url: str, model: Optional[str], counter):
        self.kind = args.backend
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.args = args
        self.counter = counter
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"

    def payload(self, session, turn, output_len: int) -> tuple:
        a = self.args
        if self.kind == "radixlm-native":
            sp = {"max_new_tokens": output_len, "temperature": a.temperature}
            if a.ignore_eos:
                sp["ignore_eos"] = True
            if turn.json_schema is not None:
                sp["json_schema"] = json.dumps(turn.json_schema)
            body = {"text": wl.render_text(session, turn), "sampling_params": sp, "stream": True}
            return "/generate", body
        body = {"model": self.model, "max_tokens": output_len, "temperature": a.temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        if a.ignore_eos:
            body["ignore_eos"] = True          # radixlm, SGLang, vLLM and llama.cpp read it
        if turn.json_schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": turn.schema_name or "output", "schema": turn.json_schema, "strict": True}}
        if self.kind == "openai-chat":
            body["messages"] = wl.render_messages(session, turn)
            return "/v1/chat/completions", body
        body["prompt"] = wl.render_text(session, turn)
        return "/v1/completions", body

    async def send(self, http, session, turn, res: Result, t0: float, on_event=None) -> None:
        """Streams one request into res (times relative to t0); on_event(res) after each token event."""
        path, body = self.payload(session, turn, turn.output_len)
        start = time.perf_counter()
        res.start = start - t0
        last = None
        prev_tokens = 0
        n_events = 0
        usage = None
        try:
            async with http.post(self.base_url + path, json=body, headers=self.headers) as resp:
                res.status = resp.status
                if resp.status != 200:
                    res.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                    return
                buf = b""
                done = False
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n\n" in buf:
                        raw, buf = buf.split(b"\n\n", 1)
                        data = _sse_data(raw)
                        if data is None:
                            continue
                        if data == "[DONE]":
                            done = True
                            break
                        msg = json.loads(data)
                        if "error" in msg and msg["error"]:
                            err = msg["error"]
                            res.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                            return
                        now = time.perf_counter()
                        new = self._apply(msg, res)
                        if self.kind == "radixlm-native":
                            tokens = res.output_tokens
                            new = tokens - prev_tokens
                            prev_tokens = tokens
                        elif msg.get("usage"):
                            usage = msg["usage"]
                        if new > 0:
                            n_events += 1
                            if last is None:
                                res.ttft = now - start
                            else:
                                gap = (now - last) / new
                                res.itls.extend([gap] * new)
                            # the first event's extra tokens arrived with the first one: no gap
                            last = now
                            res.event_times.append(now - t0)
                            res.event_tokens.append((res.event_tokens[-1] if res.event_tokens else 0) + new)
                            if on_event is not None:
                                on_event(res)
                    if done:
                        break
                if not done:
                    res.error = "stream ended without [DONE]"
                    return
        except asyncio.CancelledError:
            res.cancelled = True
            res.e2e = time.perf_counter() - start
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            res.error = f"{type(exc).__name__}: {exc}"
            return
        res.e2e = time.perf_counter() - start
        if self.kind != "radixlm-native":
            self._finish_openai(res, usage, n_events)
        if res.ttft is None:
            res.error = res.error or "no output token"
            return
        if turn.json_schema is not None:
            res.json_valid = wl.json_valid(res.text, turn.json_schema)
        res.ok = True

    def _apply(self, msg: dict, res: Result) -> int:
        """Folds one event into res; returns the new tokens it carries (OpenAI: the tokens of the chunk's
        text with a tokenizer, else 1 per content chunk)."""
        if self.kind == "radixlm-native":
            meta = msg.get("meta_info") or {}
            res.text = msg.get("text", res.text)
            res.output_tokens = int(meta.get("completion_tokens", res.output_tokens) or 0)
            res.prompt_tokens = meta.get("prompt_tokens", res.prompt_tokens)
            res.cached_tokens = meta.get("cached_tokens", res.cached_tokens)
            fr = meta.get("finish_reason")
            if isinstance(fr, dict):
                res.finish_reason = fr.get("type")
            return 0   # counted by the caller from completion_tokens
        if msg.get("timings"):   # llama.cpp: prompt_n evaluated + cache_n reused
            t = msg["timings"]
            if "cache_n" in t:
                res.cached_tokens = int(t["cache_n"])
                res.prompt_tokens = int(t.get("prompt_n", 0)) + int(t["cache_n"])
        new = 0
        for choice in msg.get("choices") or []:
            if self.kind == "openai-chat":
                delta = choice.get("delta") or {}
                piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            else:
                piece = choice.get("text") or ""
            if piece:
                res.text += piece
                new += max(1, self.counter.count(piece)) if self.counter.exact else 1
            if choice.get("finish_reason"):
                res.finish_reason = choice["finish_reason"]
        return new

    def _finish_openai(self, res: Result, usage: Optional[dict], n_events: int) -> None:
        if usage:
            res.output_tokens = int(usage.get("completion_tokens") or 0)
            res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                res.cached_tokens = int(details["cached_tokens"])
        elif self.counter.exact and res.text:
            res.output_tokens = self.counter.count(res.text)
        else:
            res.output_tokens = n_events


def _sse_data(raw: bytes) -> Optional[str]:
    lines = [ln[5:].lstrip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.startswith("data:")]
    return "\n".join(lines) if lines else None
