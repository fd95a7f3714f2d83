"""A bounded fuzz driven by the server's own OpenAPI document (FastAPI's app.openapi(); the served app
has openapi_url=None, so the document is built from the same create_app in this process): schemathesis
generates requests for every route and method in it, GET and DELETE included (path and query
parameters from the spec), valid and schema-violating (its negative mode), plus a fixed set of
malformed variants for every route (broken JSON, wrong content types, hostile path parameters,
methods a route does not have).

The handlers read raw JSON, so the spec declares no request bodies: each POST route gets one here,
the pydantic model its handler parses with where there is one (chat, completions, responses), else
"a JSON object"; and every route of the app missing from the spec (include_in_schema=False) is added
from the route list, so nothing escapes for want of a schema.

Oracles: no 5xx, no answer slower than SLOW_S, every 4xx carries a JSON error message, every stream
ends with its closing event, the KV ledger is whole afterwards and a normal request is still served.
Seeded (derandomize) and sized for CI: POSITIVE + NEGATIVE cases against --context-length 64.
"""

import json
import time

import pytest
import requests
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis")
from schemathesis import GenerationMode  # noqa: E402
from test_fuzz_routes import SLOW_S, _stream_ended  # noqa: E402

POSITIVE, NEGATIVE = 240, 120
METHODS = ("get", "post", "put", "delete", "patch")


def _body_models() -> dict:
    from radixlm.runtime.openai.protocol import ChatRequest, CompletionRequest
    from radixlm.runtime.openai.responses_protocol import ResponsesRequest
    return {"/v1/chat/completions": ChatRequest, "/v1/completions": CompletionRequest,
            "/v1/responses": ResponsesRequest}


def server_spec() -> dict:
    """The app's OpenAPI document, with a request body for every POST route that declares none and
    every app route the document leaves out."""
    from starlette.routing import Route

    from radixlm.runtime.server.http_server import create_app
    from radixlm.runtime.server_args import ServerArgs

    app = create_app(lambda: None, None, ServerArgs(model="openapi-only"))
    spec = app.openapi()
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        ops = spec["paths"].setdefault(route.path_format, {})
        for method in route.methods - {"HEAD"}:
            ops.setdefault(method.lower(), {"responses": {"200": {"description": "ok"}}, "parameters": [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in route.param_convertors]})
    models = _body_models()
    for path, ops in spec["paths"].items():
        op = ops.get("post")
        if op is None or "requestBody" in op:
            continue
        if path in models:
            schema = models[path].model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
        else:
            schema = {"type": "object"}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    return spec


def _problem(r: requests.Response, took: float, path: str):
    if r.status_code >= 500:
        return f"{r.status_code}: {r.text[:300]}"
    if took > SLOW_S:
        return f"took {took:.1f} s"
    if r.status_code >= 400:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = None
        if not isinstance(msg, str) or not msg:
            return f"{r.status_code} without a JSON error message: {r.text[:300]}"
    elif r.headers.get("content-type", "").startswith("text/event-stream") and not _stream_ended(path, r.content):
        return "a stream without its closing event"
    return None


def _send(session, method, url, path, failures, **kw):
    start = time.monotonic()
    r = session.request(method, url, timeout=SLOW_S + 30, **kw)
    problem = _problem(r, time.monotonic() - start, path)
    if problem:
        failures.append((method, url[-200:], str(kw)[:300], problem))
    return r


def _malformed(spec) -> list:
    """(method, path, request kwargs) for every route: bodies that are not JSON or not an object,
    browser-style content types, hostile path parameters, and methods the route does not have."""
    deep = b"[" * 100_000 + b"]" * 100_000
    bodies = [b"", b"{", b'{"a":', b"null", b"[]", b'"x"', b"1e999", b"\xff\xfe\x00", b'{"a": NaN}', deep,
              b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": true}' + b" " * 10,
              json.dumps({"a": "\ud800"}).encode()]
    cases = []
    for path, ops in spec["paths"].items():
        fills = [path.replace("{response_id}", v).replace("{model_id}", v)
                 for v in ("x", "..", "%00", "%2e%2e%2f", "a" * 5000, "resp_" + "0" * 32)] if "{" in path else [path]
        for concrete in fills:
            for method in METHODS:
                if method == "post" and method in ops:
                    cases += [("post", concrete, {"data": b, "headers": {"Content-Type": "application/json"}})
                              for b in bodies]
                    cases += [("post", concrete, {"data": b'{}', "headers": {"Content-Type": ct}})
                              for ct in ("text/plain", "application/x-www-form-urlencoded", "")]
                elif method in ops:
                    cases.append((method, concrete, {"params": {"include": "x" * 3000, "dp_rank": "-1",
                                                                "format": "\x00"}}))
                else:
                    cases.append((method, concrete, {"json": {}}))      # 405, with a message
    return cases


def _fuzz(schema, mode, count: int, base_url: str, session, sent: set, failures: list) -> None:
    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(schema.as_strategy(generation_mode=mode))
    def run(case):
        sent.add((case.method.upper(), case.operation.path))
        kw = case.as_transport_kwargs(base_url=base_url)
        kw.pop("timeout", None)
        method, url = kw.pop("method"), kw.pop("url")
        _send(session, method, url, case.operation.path, failures, **kw)

    run()


def test_every_spec_route_and_method_fuzzed_gets_no_5xx_no_slow_answer_and_4xx_with_messages(fuzz_target):
    spec = server_spec()
    schema = schemathesis.openapi.from_dict(spec)
    operations = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert ("GET", "/health") in operations and ("GET", "/v1/responses/{response_id}") in operations
    failures, sent = [], {GenerationMode.POSITIVE: set(), GenerationMode.NEGATIVE: set()}
    session = requests.Session()

    for mode, count in ((GenerationMode.POSITIVE, POSITIVE), (GenerationMode.NEGATIVE, NEGATIVE)):
        _fuzz(schema, mode, count, fuzz_target.url, session, sent[mode], failures)
    assert sent[GenerationMode.POSITIVE] == operations, operations - sent[GenerationMode.POSITIVE]
    posts = {op for op in operations if op[0] == "POST"}
    assert posts <= sent[GenerationMode.NEGATIVE], posts - sent[GenerationMode.NEGATIVE]

    malformed = _malformed(spec)
    for method, path, kw in malformed:
        _send(session, method, fuzz_target.url + path, path, failures, **kw)
    assert len(malformed) > 150, len(malformed)
    assert not failures, failures[:5]

    assert fuzz_target.get("/health").status_code == 200
    info = fuzz_target.wait_idle(timeout=120)
    assert info["free_slots"] + info["tree_slots"] == info["max_total_num_tokens"], info
    r = fuzz_target.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 3, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
