"""Faults on a server of its own (small KV, short heartbeat bound, an allowed host and origin, a small
body bound): each is answered with a status and a message, never a silent 200 or a bare 500.
- a request that cannot fit in the KV cache even alone is refused at admission (400);
- a body over --max-request-bytes is refused before parsing (413), with or without Content-Length;
- --allowed-hosts / --allowed-origins let those through (CORS headers only for that origin);
- a frozen scheduler (SIGSTOP) makes /health fail within the bound, and recover when it runs again;
- SIGTERM answers in-flight requests with 503 JSON, and a running stream with an error event."""

import json
import os
import signal
import threading
import time

import pytest
import requests
from server_harness import ServerProcess, child_pids, cmdline

KV_TOKENS = 128
HEALTH_BOUND_S = 3


@pytest.fixture(scope="module")
def srv(tiny_llama, tmp_path_factory):
    s = ServerProcess(tiny_llama, tmp_path_factory.mktemp("faults"), "--max-total-tokens", str(KV_TOKENS),
                      "--health-step-timeout", str(HEALTH_BOUND_S), "--allowed-hosts", "api.example.test",
                      "--allowed-origins", "http://ui.example.test", "--max-request-bytes", "100000",
                      api_key=None).wait_ready()
    yield s
    scheduler = _scheduler(s)
    if scheduler:
        os.kill(scheduler, signal.SIGCONT)
    s.stop()


def _scheduler(s):
    return next((p for p in child_pids(s.proc.pid) if "scheduler" in cmdline(p)), None)


def _error(r, status, *words):
    assert r.status_code == status, f"{r.status_code} {r.text[:300]}"
    message = r.json()["error"]["message"].lower()
    for word in words:
        assert word.lower() in message, message


def test_a_request_too_big_for_the_kv_cache_is_refused_at_admission(srv):
    before = srv.server_info()["prefill_tokens"]
    r = srv.post("/generate", json={"input_ids": [5] * 20, "sampling_params": {"max_new_tokens": 150,
                                                                               "ignore_eos": True}})
    _error(r, 400, "kv cache", "max_new_tokens")
    assert srv.server_info()["prefill_tokens"] == before        # nothing was computed
    r = srv.post("/generate", json={"input_ids": [5] * 20, "sampling_params": {"max_new_tokens": 50,
                                                                               "ignore_eos": True}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 50


def test_openai_requests_without_max_tokens_fit_a_kv_cache_smaller_than_the_context(srv):
    context = srv.get("/v1/models").json()["data"][0]["max_model_len"]
    assert context > KV_TOKENS                                 # the case: generation is bounded by KV, not context
    body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    r = srv.post("/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= KV_TOKENS
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_bodies_over_max_request_bytes_are_refused(srv):
    big = json.dumps({"text": "x" * 200_000})
    r = requests.post(srv.url + "/generate", data=big, headers={"Content-Type": "application/json"}, timeout=30)
    _error(r, 413, "--max-request-bytes")
    chunks = (big[i:i + 10_000].encode() for i in range(0, len(big), 10_000))   # chunked: no Content-Length
    r = requests.post(srv.url + "/generate", data=chunks, headers={"Content-Type": "application/json"}, timeout=30)
    _error(r, 413, "--max-request-bytes")
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200


def test_allowed_host_and_origin_get_through(srv):
    r = requests.get(srv.url + "/get_model_info", headers={"Host": "api.example.test"}, timeout=30)
    assert r.status_code == 200
    origin = "http://ui.example.test"
    r = requests.options(srv.url + "/generate", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    r = requests.post(srv.url + "/generate", json={"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}},
                      headers={"Origin": origin}, timeout=60)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    r = requests.get(srv.url + "/health", headers={"Host": "other.example.test"}, timeout=30)
    _error(r, 421, "host")


def _health(url):
    try:
        r = requests.get(url + "/health", timeout=5)
        return r.status_code, r.json()
    except requests.RequestException as exc:
        return None, str(exc)


def test_a_frozen_scheduler_fails_health_and_recovers(srv):
    assert _health(srv.url)[0] == 200
    scheduler = _scheduler(srv)
    os.kill(scheduler, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + HEALTH_BOUND_S + 20
        while (got := _health(srv.url))[0] != 503:
            assert time.monotonic() < deadline, f"/health still says {got} with the scheduler stopped"
            time.sleep(0.2)
        assert "scheduler has not answered" in got[1]["error"]["message"]
    finally:
        os.kill(scheduler, signal.SIGCONT)
    deadline = time.monotonic() + 20
    while _health(srv.url)[0] != 200:
        assert time.monotonic() < deadline, "/health did not recover"
        time.sleep(0.2)


def test_sigterm_answers_in_flight_requests_with_503_json_and_an_error_event(srv):
    stream_body = {"input_ids": [5, 6, 7], "stream": True, "sampling_params": {"max_new_tokens": 120,
                                                                               "ignore_eos": True}}
    stream = requests.post(srv.url + "/generate", json=stream_body, stream=True, timeout=60)
    assert stream.status_code == 200
    lines = stream.iter_lines()
    assert next(line for line in lines if line).startswith(b"data: {")
    scheduler = _scheduler(srv)
    os.kill(scheduler, signal.SIGSTOP)          # nothing in flight can finish now
    plain = {}

    def run_plain():
        plain["r"] = requests.post(srv.url + "/generate", json={"input_ids": [8, 9], "sampling_params": {
            "max_new_tokens": 4}}, timeout=60)

    thread = threading.Thread(target=run_plain, daemon=True)
    thread.start()
    time.sleep(1.0)
    os.kill(srv.proc.pid, signal.SIGTERM)
    try:
        thread.join(30)
        rest = [line for line in lines if line]
    finally:
        os.kill(scheduler, signal.SIGCONT)
    _error(plain["r"], 503, "shutting down")
    assert rest[-1] == b"data: [DONE]"
    event = json.loads(rest[-2][6:])
    assert "shutting down" in event["error"]["message"] and event["error"]["type"] == "server_error"
    assert srv.proc.wait(30) == 0
