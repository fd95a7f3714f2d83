"""HTTP plumbing shared by the native and OpenAI routes: errors in OpenAI's shape, JSON bodies, SSE,
and cancelling a generation when its client goes away."""

import asyncio
import contextlib
import hmac

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from radixlm.runtime.api.client_scope import SCOPE_KEY
from radixlm.runtime.api.errors import APIError  # noqa: F401  (re-exported: routes import it from here)


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def json_response(obj, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def error_response(status: int, message: str, type: str = None, param: str = None, code: str = None) -> Response:
    return json_response(APIError(status, message, type, param, code).body(), status)


def sse_event(obj) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


async def read_json(request: Request) -> dict:
    """The body as a JSON object, or APIError 415/400 naming what is wrong with it."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype != "application/json" and not ctype.endswith("+json"):
        raise APIError(415, f"Content-Type must be application/json, got {ctype!r}")
    raw = await request.body()
    if not raw.strip():
        raise APIError(400, "the request body is empty; send a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise APIError(400, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    return body


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def or_disconnect(request: Request, awaitable):
    """Await `awaitable` unless the client disconnects first: then cancel it (which aborts the
    request in the scheduler) and raise ClientGone.  Call after the body has been read."""
    task = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watcher.cancel()
        raise
    if task.done():
        watcher.cancel()
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientGone()


async def first_of(agen):
    return await agen.__anext__()


async def last_of(agen):
    last = None
    async for out in agen:
        last = out
    return last


class SSEResponse(StreamingResponse):
    """text/event-stream that always watches for the client going away (whatever the ASGI spec
    version) and closes its iterator, so an abandoned generation is aborted at once."""

    media_type = "text/event-stream"

    def __init__(self, content):
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream():
                    with contextlib.suppress(OSError):
                        await self.stream_response(send)
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()


class APIKeyMiddleware:
    """Every route but /health needs `Authorization: Bearer <key>` with one of the keys; the index of
    the key that matched goes into the scope's state (client_scope.caller_of reads it)."""

    def __init__(self, app, api_keys: list):
        self.app = app
        self.expected = [f"Bearer {k}".encode() for k in api_keys]

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/health":
            got = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    got = value
            matches = [hmac.compare_digest(got, e) for e in self.expected]   # every key compared: no timing hint
            if not any(matches):
                what = "invalid API key" if got else "missing API key"
                resp = error_response(401, f"{what}: send the header 'Authorization: Bearer <key>'",
                                      code="invalid_api_key")
                await resp(scope, receive, send)
                return
            scope.setdefault("state", {})[SCOPE_KEY] = matches.index(True)
        await self.app(scope, receive, send)
