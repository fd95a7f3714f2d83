"""A table of bad requests: each gets a 4xx whose error message names the problem, in OpenAI's error
body, and the server stays healthy afterwards."""

import pytest
import requests
from server_harness import CONTEXT_LENGTH

JSON = {"Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "hi"}]
LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 60      # far past the 256-token context

# (name, method, path, body (dict -> JSON, bytes -> raw), extra headers, status, words the message must contain)
CASES = [
    ("invalid json", "POST", "/generate", b'{"text": ', JSON, 400, ["invalid json"]),
    ("wrong content type", "POST", "/generate", b'{"text": "hi"}', {"Content-Type": "text/plain"}, 415,
     ["content-type", "application/json"]),
    ("form content type", "POST", CHAT, b"messages=hi", {"Content-Type": "application/x-www-form-urlencoded"},
     415, ["content-type"]),
    ("empty body", "POST", "/generate", b"", JSON, 400, ["empty"]),
    ("body not an object", "POST", "/generate", b"[1, 2]", JSON, 400, ["json object"]),
    ("both text and input_ids", "POST", "/generate", {"text": "a", "input_ids": [1]}, {}, 400,
     ["text", "input_ids"]),
    ("neither text nor input_ids", "POST", "/generate", {"sampling_params": {}}, {}, 400, ["text", "input_ids"]),
    ("text wrong type", "POST", "/generate", {"text": 5}, {}, 400, ["text must be"]),
    ("input_ids wrong type", "POST", "/generate", {"input_ids": ["a", "b"]}, {}, 400, ["input_ids"]),
    ("token id outside vocab", "POST", "/generate", {"input_ids": [1, 10**6]}, {}, 400, ["vocabulary"]),
    ("negative temperature", "POST", "/generate", {"text": "a", "sampling_params": {"temperature": -1}}, {}, 400,
     ["temperature"]),
    ("top_p zero", "POST", "/generate", {"text": "a", "sampling_params": {"top_p": 0}}, {}, 400, ["top_p"]),
    ("max_new_tokens not int", "POST", "/generate", {"text": "a", "sampling_params": {"max_new_tokens": "ten"}},
     {}, 400, ["max_new_tokens"]),
    ("unknown sampling param", "POST", "/generate", {"text": "a", "sampling_params": {"temprature": 1}}, {},
     400, ["temprature"]),
    ("huge n native", "POST", "/generate", {"text": "a", "sampling_params": {"n": 100000}}, {}, 400, ["n must"]),
    ("prompt longer than context", "POST", "/generate", {"input_ids": [5] * (CONTEXT_LENGTH + 10)}, {}, 400,
     ["context length"]),
    ("unknown top-level field", "POST", "/generate", {"text": "a", "frobnicate": 1}, {}, 400, ["frobnicate"]),
    ("empty batch", "POST", "/generate", {"text": []}, {}, 400, ["empty"]),
    ("rid list of the wrong length", "POST", "/generate", {"text": ["a", "b"], "rid": ["x"]}, {}, 400,
     ["rid", "1 entries for 2 prompts"]),
    ("duplicate rids in a batch", "POST", "/generate", {"text": ["a", "b"], "rid": ["x", "x"]}, {}, 400,
     ["duplicate"]),
    ("stream not bool", "POST", "/generate", {"text": "a", "stream": "yes"}, {}, 400, ["stream"]),
    ("logprob_start_len past prompt", "POST", "/generate",
     {"input_ids": [5, 6], "return_logprob": True, "logprob_start_len": 5}, {}, 400, ["logprob_start_len"]),
    ("negative top_logprobs_num", "POST", "/generate", {"text": "a", "top_logprobs_num": -1}, {}, 400,
     ["top_logprobs_num"]),
    ("stop not strings", "POST", "/generate", {"text": "a", "sampling_params": {"stop": [1]}}, {}, 400, ["stop"]),
    ("missing API key", "POST", "/generate", {"text": "a"}, {"Authorization": ""}, 401, ["api key"]),
    ("wrong API key", "GET", "/get_server_info", None, {"Authorization": "Bearer nope"}, 401, ["api key"]),
    ("wrong method", "GET", "/generate", None, {}, 405, ["method"]),
    ("unknown route", "GET", "/no/such/route", None, {}, 404, ["/no/such/route"]),
    ("abort without rid", "POST", "/abort_request", {}, {}, 400, ["rid"]),
    ("unknown model", "POST", CHAT, {"model": "gpt-9", "messages": MSGS}, {}, 404, ["gpt-9", "does not exist"]),
    ("messages missing", "POST", CHAT, {"max_tokens": 2}, {}, 400, ["messages"]),
    ("messages empty", "POST", CHAT, {"messages": []}, {}, 400, ["messages"]),
    ("bad role", "POST", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, {}, 400, ["role"]),
    ("chat temperature too high", "POST", CHAT, {"messages": MSGS, "temperature": 5}, {}, 400, ["temperature"]),
    ("chat huge n", "POST", CHAT, {"messages": MSGS, "n": 1000}, {}, 400, ["'n'"]),
    ("chat unknown field", "POST", CHAT, {"messages": MSGS, "temprature": 1}, {}, 400, ["temprature"]),
    ("top_logprobs without logprobs", "POST", CHAT, {"messages": MSGS, "top_logprobs": 2}, {}, 400,
     ["top_logprobs"]),
    ("image content part", "POST", CHAT,
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, {}, 400,
     ["image_url"]),
    ("tools", "POST", CHAT, {"messages": MSGS, "tools": [{"type": "function", "function": {"name": "f"}}]}, {},
     400, ["tools"]),
    ("json_schema without schema", "POST", CHAT, {"messages": MSGS, "response_format": {"type": "json_schema"}},
     {}, 400, ["json_schema"]),
    ("presence_penalty out of range", "POST", CHAT, {"messages": MSGS, "presence_penalty": 3}, {}, 400,
     ["presence_penalty"]),
    ("logit_bias token outside vocab", "POST", CHAT, {"messages": MSGS, "logit_bias": {"999999": 5}}, {}, 400,
     ["logit_bias"]),
    ("chat prompt longer than context", "POST", CHAT, {"messages": [{"role": "user", "content": LONG_TEXT}]}, {},
     400, ["context length"]),
    ("completion prompt longer than context", "POST", "/v1/completions", {"prompt": LONG_TEXT}, {}, 400,
     ["context length"]),
    ("completion negative max_tokens", "POST", "/v1/completions", {"prompt": "a", "max_tokens": -1}, {}, 400,
     ["max_tokens"]),
    ("completion empty prompt list", "POST", "/v1/completions", {"prompt": []}, {}, 400, ["prompt"]),
    ("completion prompt wrong type", "POST", "/v1/completions", {"prompt": {"a": 1}}, {}, 400, ["prompt"]),
    ("best_of differs from n", "POST", "/v1/completions", {"prompt": "a", "best_of": 3}, {}, 400, ["best_of"]),
    ("completion too many choices", "POST", "/v1/completions", {"prompt": ["a"] * 20, "n": 100}, {}, 400,
     ["choices"]),
    ("unknown model retrieve", "GET", "/v1/models/gpt-9", None, {}, 404, ["gpt-9"]),
]


def _send(server, case):
    name, method, path, body, headers, status, words = case
    all_headers = {**server.headers, **headers}
    if body is None or isinstance(body, bytes):
        return requests.request(method, server.url + path, data=body, headers=all_headers, timeout=30)
    return requests.request(method, server.url + path, json=body, headers=all_headers, timeout=30)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request(server, case):
    name, method, path, body, headers, status, words = case
    r = _send(server, case)
    assert r.status_code == status, f"{name}: {r.status_code} {r.text}"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    for word in words:
        assert word.lower() in error["message"].lower(), f"{name}: {error['message']!r} lacks {word!r}"
    assert requests.get(server.url + "/health", timeout=10).status_code == 200     # no key needed here


def _finished(server) -> dict:
    """The scheduler's finished-request counters from /metrics (requests by finish reason, prompt tokens)."""
    lines = server.get("/metrics").text.splitlines()
    return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in lines
            if ln.startswith(("radixlm_requests_total", "radixlm_prompt_tokens_total"))}


def test_bad_requests_leave_the_server_as_it_was(server):
    """Oracle: the server before the table.  No refused request reaches the scheduler (its finished-request
    counters stay where they were), and a greedy request answers the same, token for token, after them."""
    good = {"text": "The quick brown fox", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
    before = server.post("/generate", json=good).json()
    server.wait_idle()
    counters = _finished(server)
    assert counters, "no finished-request counters in /metrics"
    for case in CASES:
        assert _send(server, case).status_code == case[5], case[0]
    server.wait_idle()
    assert _finished(server) == counters
    after = server.post("/generate", json=good).json()
    assert after["output_ids"] == before["output_ids"] and after["text"] == before["text"]
