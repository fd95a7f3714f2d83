"""SGLang wire compatibility against real servers (tiny random model): the all-defaults body a gateway
sends, refusals by name, stop_regex against a Python `re` oracle (plain and streamed), extra_key /
cache_salt cache isolation with the KV ledger, the streaming contract in both modes, and the routes
SGLang's gateway probes."""

import json
import re
import uuid

import pytest
from server_harness import ServerProcess
from sglang_schema import all_defaults_body

GREEDY = {"temperature": 0, "ignore_eos": True}


def generate(server, **body):
    r = server.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, **body) -> list:
    r = server.post("/generate", json={**body, "stream": True}, stream=True)
    assert r.status_code == 200, r.text
    lines = [ln for ln in r.iter_lines(decode_unicode=True) if ln]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[6:]) for ln in lines[:-1]]


@pytest.fixture(scope="module")
def incremental_server(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("inc"), "--check-ledger",
                        "--incremental-streaming-output").wait_ready()
    yield srv
    assert srv.stop() == 0


# ---- the request schema ----

def test_all_defaults_body_returns_the_minimal_result(server):
    params = {**GREEDY, "max_new_tokens": 8}
    minimal = generate(server, text="The quick brown fox", sampling_params=params)
    body = all_defaults_body()
    body.update(text="The quick brown fox", sampling_params={**body["sampling_params"], **params})
    full = generate(server, **body)
    assert full["text"] == minimal["text"] and full["output_ids"] == minimal["output_ids"]
    assert full["meta_info"]["finish_reason"] == minimal["meta_info"]["finish_reason"]


@pytest.mark.parametrize("body,needle", [
    ({"return_hidden_states": True}, "return_hidden_states"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"sampling_params": {"stop_regex": "(unclosed"}}, "stop_regex"),
    ({"sampling_params": {"temprature": 0}}, "temprature"),
])
def test_unsupported_values_and_unknown_names_get_a_400_naming_them(server, body, needle):
    r = server.post("/generate", json={"text": "hi", **body})
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text


# ---- stop_regex against a re oracle ----

def oracle(tokenizer, ids, patterns, no_stop_trim=False):
    """(output ids, text, matched pattern) that SGLang's stop_regex semantics give for a greedy output
    `ids`: the first token count whose decoded text re.search matches, the text cut at the match."""
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        hits = [(m.start(), i, m) for i, p in enumerate(patterns) if (m := re.search(p, text))]
        if hits:
            _, i, m = min(hits, key=lambda h: (h[0], h[1]))
            return ids[:k], text[:m.end() if no_stop_trim else m.start()], patterns[i]
    return ids, tokenizer.decode(ids, skip_special_tokens=True), None


def patterns_for(text: str) -> list:
    """Patterns that first match at different depths of a generated text: a literal, a class and an
    unbounded one, each built from characters the text really has."""
    a, b = text[len(text) // 3], text[len(text) // 2:len(text) // 2 + 2]
    return [[re.escape(b)], [f"[{re.escape(a)}]{re.escape(b[0])}?", re.escape(b)], [re.escape(a) + r"\S*?" + re.escape(b[-1])]]


@pytest.mark.parametrize("prompt", ["Hello, world!", "def add(a, b):"])
def test_stop_regex_stops_where_re_says_plain_and_streamed(server, tokenizer, prompt):
    free = generate(server, text=prompt, sampling_params={**GREEDY, "max_new_tokens": 24})
    ids = free["output_ids"]
    checked = 0
    for patterns in patterns_for(free["text"]):
        for trim in (False, True):
            want_ids, want_text, matched = oracle(tokenizer, ids, patterns, trim)
            assert matched is not None, (patterns, free["text"])
            params = {**GREEDY, "max_new_tokens": 24, "stop_regex": patterns, "no_stop_trim": trim}
            out = generate(server, text=prompt, sampling_params=params)
            assert out["output_ids"] == want_ids, patterns
            assert out["text"] == want_text, patterns
            assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": matched}
            events = stream(server, text=prompt, sampling_params=params)
            for e in events:
                assert want_text.startswith(e["text"]), (e["text"], want_text)   # nothing streamed is taken back
            assert events[-1]["text"] == want_text and events[-1]["output_ids"] == want_ids
            checked += 1
    assert checked == 6


def test_stop_regex_string_form_and_no_match_runs_to_length(server):
    out = generate(server, text="Hello", sampling_params={**GREEDY, "max_new_tokens": 6, "stop_regex": "\u2603{3}"})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 6}


# ---- extra_key / cache_salt ----

def test_extra_key_isolates_the_prefix_cache_and_the_ledger_holds(server):
    prompt = f"namespace probe {uuid.uuid4().hex} " * 3
    params = {**GREEDY, "max_new_tokens": 2}

    def cached(**kw):
        return generate(server, text=prompt, sampling_params=params, **kw)["meta_info"]

    first = cached(extra_key="alice")
    n = first["prompt_tokens"]
    assert first["cached_tokens"] == 0
    assert cached(extra_key="bob")["cached_tokens"] == 0          # same prompt, other key: no hit
    assert cached()["cached_tokens"] == 0                         # nor the shared namespace
    assert cached(cache_salt="alice")["cached_tokens"] == 0       # a salt is not the same as a key
    assert cached(extra_key="alice")["cached_tokens"] == n - 1    # same key: the whole prefix (the last
    assert cached(extra_key="bob")["cached_tokens"] == n - 1      # prompt token is always recomputed)
    info = server.wait_idle()
    assert info["free_slots"] + info["tree_slots"] == info["max_total_num_tokens"]


# ---- streaming contract ----

def _check_logprob_deltas(events):
    prev = 0
    for e in events:
        meta = e["meta_info"]
        assert {"id", "prompt_tokens", "completion_tokens", "finish_reason"} <= set(meta)
        assert meta["output_token_logprobs_length"] == meta["completion_tokens"]
        assert len(meta["output_token_logprobs"]) == meta["completion_tokens"] - prev
        assert len(meta["output_top_logprobs"]) == len(meta["output_token_logprobs"])
        prev = meta["completion_tokens"]


def test_streams_cumulative_text_and_logprob_deltas_by_default(server):
    body = dict(text="Hello, world!", sampling_params={**GREEDY, "max_new_tokens": 10}, return_logprob=True,
                top_logprobs_num=2)
    plain, events = generate(server, **body), stream(server, **body)
    _check_logprob_deltas(events)
    merged = [lp for e in events for lp in e["meta_info"]["output_token_logprobs"]]
    assert [t[1] for t in merged] == plain["output_ids"]
    assert [t[0] for t in merged] == pytest.approx([t[0] for t in plain["meta_info"]["output_token_logprobs"]])
    for before, after in zip(events, events[1:]):
        assert after["text"].startswith(before["text"])
    assert events[-1]["text"] == plain["text"] and events[-1]["output_ids"] == plain["output_ids"]


def test_incremental_streaming_sends_deltas(incremental_server, server):
    body = dict(text="The quick brown fox", sampling_params={**GREEDY, "max_new_tokens": 10}, return_logprob=True)
    want = generate(server, **body)
    for _ in range(3):      # events that arrive while the server's loop is behind are merged: retry one merge
        events = stream(incremental_server, **body)
        if len(events) >= 2:
            break
    assert len(events) >= 2
    assert "".join(e["text"] for e in events) == want["text"]
    assert [t for e in events for t in e["output_ids"]] == want["output_ids"]
    _check_logprob_deltas(events)


def test_frontend_runtime_endpoint_rebuilds_cumulative_results(incremental_server, server):
    from radixlm.frontend_lang.backends import RuntimeEndpoint
    params = {**GREEDY, "max_new_tokens": 8}
    for srv in (server, incremental_server):
        backend = RuntimeEndpoint(srv.url, api_key=srv.api_key)
        outs = list(backend.generate_stream(text="Hello", sampling_params=params, return_logprob=True))
        final = outs[-1]
        assert final["output_ids"] == generate(server, text="Hello", sampling_params=params)["output_ids"]
        assert [t[1] for t in final["meta_info"]["output_token_logprobs"]] == final["output_ids"]


# ---- probed routes ----

def test_probed_routes_answer_in_sglangs_shapes(server):
    load = server.get("/get_load").json()
    assert isinstance(load, list) and set(load[0]) >= {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
    assert server.get("/version").json()["version"]
    info = server.get("/model_info").json()
    assert info["is_generation"] is True and info["model_path"] and info["tokenizer_path"]
    assert info["model_type"] == "llama"
    sinfo = server.get("/server_info").json()
    assert sinfo["internal_states"][0]["max_total_num_tokens"] == sinfo["max_total_num_tokens"] > 0
    before = server.get("/metrics").text
    assert server.get("/health_generate").status_code == 200
    requests_line = [ln for ln in server.get("/metrics").text.splitlines()
                     if ln.startswith("radixlm_requests_total")]
    assert requests_line == [ln for ln in before.splitlines() if ln.startswith("radixlm_requests_total")]
