"""A bounded fuzz of every POST route: FUZZ_BODIES hypothesis-built bodies (known field names with
plausible and hostile values, unknown names, odd message lists with null contents and tool roles)
against a server of its own with --check-ledger.  Oracles: no 5xx, no answer slower than
SLOW_S, every 4xx carries a non-empty error message, and the server is still healthy afterwards.
"""

import functools
import time

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# bodies carry no subnormal floats: hypothesis refuses to draw them in a process whose FPU flushes them
# (the native kernels did so once, through -ffast-math's crtfastmath.o; tests/kernels checks they no longer do)
_floats = functools.partial(st.floats, allow_subnormal=False)

FUZZ_BODIES = 1000
SLOW_S = 30.0
ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/abort_request",
          "/flush_cache")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 300),
                    _floats(allow_nan=False, allow_infinity=False), st.text(max_size=40))
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                                             inner, max_size=4),
                        max_leaves=12)
small_int = st.integers(-2, 48)
token_ids = st.lists(st.integers(-5, 500), max_size=30)
text = st.text(max_size=60)
SAMPLING = {
    "max_new_tokens": small_int, "min_new_tokens": small_int, "temperature": _floats(-1, 3) | scalars,
    "top_p": _floats(-0.5, 1.5), "top_k": small_int, "min_p": _floats(-1, 2), "n": st.integers(-1, 4),
    "repetition_penalty": _floats(-1, 3), "frequency_penalty": _floats(-3, 3),
    "presence_penalty": _floats(-3, 3), "stop": st.one_of(text, st.lists(text, max_size=3), anything),
    "stop_token_ids": token_ids, "stop_regex": st.one_of(text, st.sampled_from(["(", "a+", "[0-9]{2}", ".*"])),
    "ignore_eos": st.booleans(), "seed": st.integers(-2**64, 2**64), "regex": st.sampled_from(["a+", "(", "[", "\\d{3}"]),
    "json_schema": st.sampled_from(['{"type": "object"}', "{", '{"type": "integer"}', '{"$ref": "#/x"}']),
    "ebnf": st.sampled_from(['root ::= "a"', "root ::=", 'root ::= "ab" root']),
    "logit_bias": st.dictionaries(st.sampled_from(["1", "5", "-3", "x", "99999"]), _floats(-200, 200)),
    "skip_special_tokens": st.booleans(), "no_stop_trim": st.booleans(), "jump_forward": st.booleans(),
}
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "bogus"])
content = st.one_of(st.none(), text, st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]),
                                                                      "text": st.none() | text}), max_size=3),
                    anything)
tool_call = st.fixed_dictionaries({"id": st.none() | text, "type": st.just("function"), "function":
                                   st.fixed_dictionaries({"name": text, "arguments": st.one_of(text, anything)})})
message = st.fixed_dictionaries({"role": ROLES}, optional={"content": content, "name": text, "tool_call_id": text,
                                                            "tool_calls": st.lists(tool_call, max_size=2)})
messages = st.one_of(st.lists(message, min_size=0, max_size=6), anything)
tool = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.sampled_from(["f", "get_weather", ""])}, optional={"parameters": st.one_of(
        st.just({"type": "object", "properties": {"a": {"type": "integer"}}}), anything)})})
OPENAI = {
    "model": st.sampled_from(["default", "nope"]) | text, "max_tokens": small_int, "temperature": _floats(-1, 3),
    "top_p": _floats(-0.5, 1.5), "n": st.integers(-1, 4), "stop": st.one_of(text, anything), "seed": small_int,
    "stream": st.booleans(), "stream_options": st.one_of(st.just({"include_usage": True}), anything),
    "logit_bias": st.dictionaries(st.sampled_from(["1", "x", "99999"]), _floats(-200, 200)),
    "response_format": st.one_of(st.just({"type": "json_object"}), st.just({"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}}}), anything),
    "presence_penalty": _floats(-3, 3), "frequency_penalty": _floats(-3, 3), "ignore_eos": st.booleans(),
    "cache_salt": st.none() | text, "regex": st.sampled_from(["a+", "("]), "top_k": small_int,
}
BODIES = {
    "/generate": st.fixed_dictionaries({}, optional={
        "text": st.one_of(text, st.lists(text, max_size=3)), "input_ids": st.one_of(token_ids, st.lists(token_ids,
                                                                                                        max_size=3)),
        "sampling_params": st.one_of(st.fixed_dictionaries({}, optional=SAMPLING), anything),
        "stream": st.booleans(), "rid": st.one_of(text, anything), "return_logprob": st.booleans(),
        "logprob_start_len": small_int, "top_logprobs_num": small_int, "return_text_in_logprobs": st.booleans(),
        "extra_key": st.none() | text, "cache_salt": st.none() | text, "bogus_field": anything}),
    "/v1/completions": st.fixed_dictionaries({}, optional={
        **OPENAI, "prompt": st.one_of(text, st.lists(text, max_size=3), token_ids, st.lists(token_ids, max_size=3),
                                      anything),
        "echo": st.booleans(), "logprobs": st.integers(-1, 25), "suffix": st.none() | text,
        "best_of": st.integers(-1, 4)}),
    "/v1/chat/completions": st.fixed_dictionaries({}, optional={
        **OPENAI, "messages": messages, "logprobs": st.booleans(), "top_logprobs": st.integers(-1, 25),
        "max_completion_tokens": small_int, "tools": st.one_of(st.lists(tool, max_size=2), anything),
        "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), anything),
        "parallel_tool_calls": st.booleans()}),
    "/v1/responses": st.fixed_dictionaries({}, optional={
        "model": st.just("default"), "input": st.one_of(text, messages), "instructions": text,
        "max_output_tokens": small_int, "tools": st.one_of(st.lists(tool, max_size=2), anything),
        "stream": st.booleans(), "previous_response_id": text, "temperature": _floats(-1, 3)}),
    "/abort_request": st.fixed_dictionaries({}, optional={"rid": anything, "abort_all": anything}),
    "/flush_cache": st.fixed_dictionaries({}, optional={"x": anything}),
}


def _stream_ended(route: str, content: bytes) -> bool:
    """Chat, completions and native streams end with [DONE]; a Responses stream (as OpenAI's) ends with
    its terminal event instead."""
    if route == "/v1/responses":
        return any(b"event: " + e in content for e in (b"response.completed", b"response.incomplete",
                                                       b"response.failed", b"error"))
    return b"data: [DONE]" in content


def _check(srv, route, body, failures):
    start = time.monotonic()
    try:
        r = requests.post(srv.url + route, json=body, timeout=SLOW_S + 30)
    except ValueError:        # a body requests cannot serialize: not a server problem
        return
    took = time.monotonic() - start
    problem = None
    if r.status_code >= 500:
        problem = f"{r.status_code}: {r.text[:300]}"
    elif took > SLOW_S:
        problem = f"took {took:.1f} s"
    elif r.status_code >= 400:
        msg = r.json().get("error", {}).get("message") if r.headers.get("content-type", "").startswith(
            "application/json") else None
        if not msg:
            problem = f"{r.status_code} without a message: {r.text[:300]}"
    elif r.headers.get("content-type", "").startswith("text/event-stream") and not _stream_ended(route, r.content):
        problem = "a stream without its closing event"
    if problem:
        failures.append((route, body, problem))


def test_fuzzed_bodies_get_no_5xx_no_slow_answer_and_4xx_with_messages(fuzz_target):
    failures, sent = [], []
    bodies = st.sampled_from(ROUTES).flatmap(lambda route: st.tuples(st.just(route), BODIES[route]))

    @settings(max_examples=FUZZ_BODIES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(bodies)
    def run(case):
        route, body = case
        sent.append(route)
        _check(fuzz_target, route, body, failures)

    run()
    assert len(sent) >= FUZZ_BODIES * 0.9, len(sent)
    assert set(sent) == set(ROUTES)
    assert not failures, failures[:5]
    assert fuzz_target.get("/health").status_code == 200
    info = fuzz_target.wait_idle(timeout=120)
    assert info["free_slots"] + info["tree_slots"] == info["max_total_num_tokens"], info
