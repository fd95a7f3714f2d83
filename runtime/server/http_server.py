"""The HTTP server: SGLang-native routes here, OpenAI routes in openai_api.py, metrics in metrics.py,
shared plumbing (errors, SSE, disconnects, API key) in http_common.py.

    serve(args)  launch_backend -> tokenizer -> uvicorn (uvloop) whose lifespan builds the
                 TokenizerManager in the server's own loop; prints one ready line once it can serve;
                 SIGTERM/SIGINT or a dead child process end it, and the children are always stopped.
    create_app(tokenizer_manager, backend, args)  the FastAPI app; tokenizer_manager is an instance or
                 a zero-argument factory (called inside the lifespan, i.e. in the serving loop).

Every error answers `{"error": {"message", "type", "param", "code"}}` (OpenAI's shape) with a 4xx/5xx
status.  A client that disconnects, streaming or not, cancels its generation, which aborts the request
in the scheduler (TokenizerManager.generate_one's finally), so its KV is freed.
"""

import asyncio
import contextlib
import logging
import signal
import threading
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from radixlm.runtime.api.client_scope import caller_of, parse_api_keys
from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.api.http import (
    SSE_DONE,
    APIError,
    APIKeyMiddleware,
    ClientGone,
    SSEResponse,
    error_response,
    first_of,
    json_response,
    last_of,
    or_disconnect,
    read_json,
    sse_event,
)
from radixlm.runtime.api.request_flow import run_generate
from radixlm.runtime.server.guard import add_guards
from radixlm.runtime.server.health import Heartbeat, shutdown_deadline, watchdog
from radixlm.runtime.server.metrics import Metrics
from radixlm.runtime.server.native_stream import NativeStreamShaper
from radixlm.runtime.server.sglang_routes import add_sglang_routes, model_info_payload, server_info_payload

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 3.0      # in-flight requests may finish this long after SIGTERM (then: 503)
CONTROL_TIMEOUT_S = 10.0
HEALTH_GENERATE_TIMEOUT_S = 20.0


# ---- server state ----

class ServerState:
    def __init__(self, tokenizer_manager, backend, args):
        factory = tokenizer_manager if callable(tokenizer_manager) and not hasattr(tokenizer_manager, "prepare") \
            else None
        self.tm = None if factory else tokenizer_manager
        self.tm_factory = factory
        self.backend, self.args = backend, args
        self.metrics = Metrics()
        self.dead = None                 # name of a child process that exited
        self.exit_code = 0
        self.stopping = False            # a stop signal arrived: children may die, that is expected
        self.request_exit = lambda: None  # set by serve(): asks uvicorn to shut down
        self.heartbeat = None            # Heartbeat, while serving with a backend
        self.loop = None                 # the serving loop (set in the lifespan)
        self.started = int(time.time())
        info = backend.info if backend is not None else {}
        self.model_path = info.get("model_path", args.model)
        # off by the user's flag, or by the model's recurrent state (runtime/scheduler/hybrid_rules.py)
        self.prefix_cache = not (args.disable_radix_cache or info.get("disable_radix_cache", False))
        self.served_model_name = args.served_model_name or args.model

    def check_alive(self) -> None:
        dead = self.dead or (self.backend.dead_child() if self.backend is not None else None)
        if dead:
            raise APIError(503, f"the {dead} process has exited; the server is shutting down",
                           code="service_unavailable")
        if self.stopping:
            raise APIError(503, "the server is shutting down", code="service_unavailable")

    def on_stop_signal(self) -> None:
        self.stopping = True
        if self.loop is not None:
            shutdown_deadline(self, self.loop, GRACEFUL_SHUTDOWN_S)


# ---- the app ----

def create_app(tokenizer_manager, backend, args) -> FastAPI:
    state = ServerState(tokenizer_manager, backend, args)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        created = state.tm is None
        if created:
            state.tm = state.tm_factory()
        state.tm.listeners.append(state.metrics.on_output)
        state.loop = asyncio.get_running_loop()
        tasks = []
        if backend is not None:
            state.heartbeat = Heartbeat(state.tm, args.health_step_timeout)
            tasks = [asyncio.create_task(watchdog(state)), asyncio.create_task(state.heartbeat.run())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            if created:
                state.tm.close()

    app = FastAPI(title="radixlm", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.radixlm = state
    _add_error_handlers(app)
    _add_native_routes(app, state)
    from radixlm.runtime.openai.handlers import add_openai_routes
    add_openai_routes(app, state)
    if args.api_key:
        app.add_middleware(APIKeyMiddleware, api_keys=parse_api_keys(args.api_key))
    add_guards(app, args)   # outermost: Host, Origin, Content-Type and size are checked first
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def on_api_error(request, exc: APIError):
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code)

    @app.exception_handler(ClientGone)
    async def on_client_gone(request, exc):
        return Response(status_code=499)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request, exc):
        if exc.status_code == 404:
            return error_response(404, f"no route {request.method} {request.url.path}", code="not_found")
        if exc.status_code == 405:
            return error_response(405, f"method {request.method} is not allowed on {request.url.path}")
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request, exc):
        return error_response(400, f"invalid request: {exc.errors()}")

    @app.exception_handler(Exception)
    async def on_unexpected(request, exc):
        logger.exception("internal error on %s", request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


# ---- native (SGLang) routes ----

def native_request(body: dict) -> GenerateReqInput:
    """A /generate body as GenerateReqInput; null fields take their defaults; SGLang's fields are sorted
    by runtime/api/sglang_fields.py, and unknown ones are refused by normalize() ("unknown field(s): ...")."""
    return GenerateReqInput.from_body(body)


def native_events(out, prev, shaper=None) -> list:
    """SSE payloads for one cumulative result (runtime/server/native_stream.py: SGLang's streaming shape)."""
    return (shaper or NativeStreamShaper()).events(out, prev)


async def _native_stream(first, gen, incremental: bool = False):
    prev, shaper = None, NativeStreamShaper(incremental)
    try:
        out = first
        while True:
            for event in native_events(out, prev, shaper):
                yield sse_event(event)
            prev = out
            try:
                out = await gen.__anext__()
            except StopAsyncIteration:
                break
    except APIError as exc:
        yield sse_event(exc.body())
    except ValueError as exc:
        yield sse_event({"error": {"message": str(exc), "type": "invalid_request_error", "param": None,
                                   "code": None}})
    except Exception as exc:  # a bug: tell the client in-band, the status line is long gone
        logger.exception("stream failed")
        yield sse_event({"error": {"message": f"internal error: {exc}", "type": "server_error", "param": None,
                                   "code": None}})
    finally:
        await gen.aclose()
    yield SSE_DONE


def _add_native_routes(app: FastAPI, state: ServerState) -> None:
    @app.post("/generate")
    async def generate(request: Request):
        obj = native_request(await read_json(request))
        state.check_alive()
        gen = run_generate(state.tm, obj, caller_of(request, state.args))
        try:
            if obj.stream:
                first = await or_disconnect(request, first_of(gen))
                incremental = getattr(state.args, "incremental_streaming_output", False)
                return SSEResponse(_native_stream(first, gen, incremental))
            return json_response(await or_disconnect(request, last_of(gen)))
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        except StopAsyncIteration:
            raise APIError(500, "the request produced no output") from None

    @app.get("/health")
    async def health():
        try:
            state.check_alive()
        except APIError as exc:
            return error_response(503, exc.message, code="service_unavailable")
        stuck = state.heartbeat.problem() if state.heartbeat is not None else None
        if stuck:
            return error_response(503, stuck, code="service_unavailable")
        return json_response({"status": "ok"})

    @app.get("/health_generate")
    async def health_generate(request: Request):
        state.check_alive()
        obj = GenerateReqInput(input_ids=[0], sampling_params={"max_new_tokens": 1, "temperature": 0},
                               rid=f"health-{uuid.uuid4().hex}", log_metrics=False)
        try:
            out = await asyncio.wait_for(last_of(run_generate(state.tm, obj)), HEALTH_GENERATE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise APIError(503, "the model did not generate a token in time", code="service_unavailable") from None
        except APIError as exc:
            raise APIError(503, f"generation failed: {exc.message}", code="service_unavailable") from None
        return json_response({"status": "ok", "output_ids": out["output_ids"]})

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info():
        return json_response(model_info_payload(state))

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info():
        return json_response(server_info_payload(state, await _scheduler_info(state)))

    @app.post("/flush_cache")
    async def flush_cache():
        state.check_alive()
        if state.tm.states:
            raise APIError(400, f"cannot flush the cache while {len(state.tm.states)} request(s) are running")
        try:
            out = await asyncio.wait_for(state.tm.flush_cache(), CONTROL_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise APIError(503, "the scheduler did not answer", code="service_unavailable") from None
        if not out.success:
            raise APIError(400, f"cache not flushed: {out.message}")
        return json_response({"success": True, "message": out.message})

    @app.post("/abort_request")
    async def abort_request(request: Request):
        body = await read_json(request)
        rid = body.get("rid")
        owner = caller_of(request, state.args).key
        if body.get("abort_all") is True:
            rids = state.tm.abort_label(None, owner)
        elif isinstance(rid, str) and rid:
            rids = state.tm.abort_label(rid, owner)
        else:
            raise APIError(400, "give 'rid' (a non-empty string) or 'abort_all': true", param="rid")
        return json_response({"success": bool(rids), "aborted": rids})

    add_sglang_routes(app, state, _scheduler_info)

    @app.get("/metrics")
    async def metrics():
        with contextlib.suppress(Exception):
            state.metrics.update_server_info(await _scheduler_info(state, timeout=2.0))
        return Response(state.metrics.render(), media_type=state.metrics.content_type)


async def _scheduler_info(state: ServerState, timeout: float = CONTROL_TIMEOUT_S) -> dict:
    state.check_alive()
    try:
        return await asyncio.wait_for(state.tm.get_server_info(), timeout)
    except asyncio.TimeoutError:
        raise APIError(503, "the scheduler did not answer", code="service_unavailable") from None


# ---- serve ----

def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401
        return "uvloop"
    except ImportError:
        return "asyncio"


def _make_server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn.Server that reports readiness and does not re-raise SIGTERM/SIGINT on the way out
        (serve() still has the child processes to stop)."""

        on_ready = None
        on_signal = None

        def handle_exit(self, sig, frame) -> None:
            if self.on_signal is not None:
                self.on_signal()
            super().handle_exit(sig, frame)

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit and self.on_ready is not None:
                self.on_ready()

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    return Server


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


class _TokenizerLoader:
    """Loads the model's tokenizer in a thread while the scheduler starts (the folder resolved first, here:
    a GGUF is converted once, before any child reads it)."""

    def __init__(self, model: str):
        from radixlm.runtime.model_paths import resolve_model_path

        self._path, self._tokenizer, self._error = None, None, None
        with contextlib.suppress(FileNotFoundError):   # launch_backend reports it
            self._path = str(resolve_model_path(model))
        self._thread = threading.Thread(target=self._load, daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            from transformers import AutoTokenizer
            if self._path is not None:
                self._tokenizer = AutoTokenizer.from_pretrained(self._path, trust_remote_code=False)
        except Exception as exc:  # raised again in the main thread by result()
            self._error = exc

    def result(self, model_path: str):
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._tokenizer is None or model_path != self._path:
            from transformers import AutoTokenizer
            return AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
        return self._tokenizer


def serve(args) -> int:
    """Run the server until SIGTERM/SIGINT (returns 0) or a child process dies (returns 1)."""
    import uvicorn

    from radixlm.runtime.logging_setup import setup_logging
    from radixlm.runtime.server.launch import launch_backend
    from radixlm.runtime.server.tokenizer_manager import TokenizerManager

    setup_logging(args.log_level, "main")
    for sig in (signal.SIGINT, signal.SIGTERM):   # while loading: unwind, so the children are stopped
        signal.signal(sig, _exit_on_signal)
    # importing transformers and loading the tokenizer take seconds: overlap them with the children's start
    tokenizer = _TokenizerLoader(args.model)
    backend = launch_backend(args)
    try:
        tokenizer = tokenizer.result(backend.info["model_path"])
        if getattr(args, "chat_template", None):
            from radixlm.runtime.openai.prompts import load_chat_template
            tokenizer.chat_template = load_chat_template(args.chat_template)
        elif not getattr(tokenizer, "chat_template", None):   # a vision-language folder's processor may hold it
            from radixlm.runtime.models.multimodal_text import processor_chat_template
            tokenizer.chat_template = processor_chat_template(backend.info["model_path"])
        name = args.served_model_name or args.model
        app = create_app(lambda: TokenizerManager(tokenizer, backend.info, backend.addrs, name), backend, args)
        state = app.state.radixlm
        config = uvicorn.Config(app, host=args.host, port=args.port, loop=_loop_name(), log_config=None,
                                log_level=args.log_level.lower(), access_log=False, lifespan="on",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        server = _make_server_class()(config)

        def ready():
            line = f"radixlm ready: http://{args.host}:{args.port} (model {state.model_path})"
            print(line, flush=True)

        server.on_ready = ready
        server.on_signal = state.on_stop_signal
        state.request_exit = lambda: setattr(server, "should_exit", True)
        server.run()
        return state.exit_code
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        backend.stop()
        logger.info("stopped")
