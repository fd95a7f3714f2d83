"""SGLang-native routes against a real server (tiny random model): shapes, streaming, batches, prefix
caching, logprobs, control routes, metrics, disconnects.  Oracles: the model's own tokenizer, greedy
determinism across request shapes, and the scheduler's KV counters."""

import json
import socket
import threading
import time

from radixlm.runtime.server.http_server import native_events, native_request

GREEDY = {"temperature": 0}


# ---- pure adapters ----

def test_native_request_drops_nulls_and_collects_unknown_fields():
    obj = native_request({"text": "a", "image_data": None, "rid": None, "frobnicate": 1})
    assert obj.text == "a" and obj.rid is None and obj.extra == {"frobnicate": 1}


def test_native_events_emit_only_changed_batch_items_with_index():
    a0, b0 = {"text": "x"}, {"text": "y"}
    a1 = {"text": "xx"}
    assert native_events({"text": "x"}, None) == [{"text": "x"}]
    assert native_events([a0, None], None) == [{"text": "x", "index": 0}]
    assert native_events([a1, b0], [a0, None]) == [{"text": "xx", "index": 0}, {"text": "y", "index": 1}]
    assert native_events([a1, b0], [a1, b0]) == []


# ---- helpers ----

def generate(server, **body):
    r = server.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def stream_events(server, **body) -> tuple:
    """(events, raw lines) of a streamed /generate."""
    r = server.post("/generate", json={**body, "stream": True}, stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in r.iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    return [json.loads(line[6:]) for line in lines[:-1]], lines


# ---- /generate ----

def test_generate_text_shape_and_tokenizer_oracle(server, tokenizer):
    prompt = "The quick brown fox"
    out = generate(server, text=prompt, sampling_params={**GREEDY, "max_new_tokens": 6, "ignore_eos": True})
    meta = out["meta_info"]
    assert set(meta) >= {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency"}
    assert meta["prompt_tokens"] == len(tokenizer.encode(prompt))
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["completion_tokens"] == len(out["output_ids"]) == 6
    assert out["text"] == tokenizer.decode(out["output_ids"], skip_special_tokens=True)
    again = generate(server, input_ids=tokenizer.encode(prompt),
                     sampling_params={**GREEDY, "max_new_tokens": 6, "ignore_eos": True}, rid="fixed-rid-1")
    assert again["output_ids"] == out["output_ids"]          # same ids -> same greedy output
    assert again["meta_info"]["id"] == "fixed-rid-1"


def test_batch_in_batch_out_matches_single_requests(server):
    prompts = ["Hello, world!", "def add(a, b):", "0123456789"]
    params = {**GREEDY, "max_new_tokens": 5, "ignore_eos": True}
    batch = generate(server, text=prompts, sampling_params=params)
    assert isinstance(batch, list) and len(batch) == 3
    for prompt, out in zip(prompts, batch):
        assert out["output_ids"] == generate(server, text=prompt, sampling_params=params)["output_ids"]
    by_ids = generate(server, input_ids=[[5, 6, 7], [8, 9]], sampling_params=[params, {**params, "max_new_tokens": 2}])
    assert [len(o["output_ids"]) for o in by_ids] == [5, 2]


def test_stream_is_cumulative_and_ends_like_the_plain_answer(server):
    params = {**GREEDY, "max_new_tokens": 12, "ignore_eos": True}
    for _ in range(3):      # events that arrive while the server's loop is behind are merged: retry one merge
        events, _ = stream_events(server, text="Hello, world!", sampling_params=params)
        if len(events) >= 2:
            break
    assert len(events) >= 2
    for before, after in zip(events, events[1:]):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][:len(before["output_ids"])] == before["output_ids"]
        assert after["meta_info"]["id"] == before["meta_info"]["id"]
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
    final = events[-1]
    plain = generate(server, text="Hello, world!", sampling_params=params)
    assert final["text"] == plain["text"] and final["output_ids"] == plain["output_ids"]
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 12}


def test_stream_batch_events_carry_their_index(server):
    params = {**GREEDY, "max_new_tokens": 4, "ignore_eos": True}
    events, _ = stream_events(server, text=["Hello", "The quick"], sampling_params=params)
    finals = {e["index"]: e for e in events if e["meta_info"]["finish_reason"] is not None}
    assert sorted(finals) == [0, 1]
    for i, prompt in enumerate(["Hello", "The quick"]):
        assert finals[i]["output_ids"] == generate(server, text=prompt, sampling_params=params)["output_ids"]


def test_max_new_tokens_zero_caches_the_prefix(server):
    prefix = list(range(100, 160))
    out = generate(server, input_ids=prefix, sampling_params={"max_new_tokens": 0})
    assert out["output_ids"] == [] and out["text"] == ""
    assert out["meta_info"]["completion_tokens"] == 0
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    follow = generate(server, input_ids=prefix + [7, 8, 9], sampling_params={"max_new_tokens": 1})
    assert follow["meta_info"]["cached_tokens"] == len(prefix)


def test_input_and_output_logprobs(server, tokenizer):
    ids = tokenizer.encode("The quick brown fox jumps")
    body = dict(input_ids=ids, sampling_params={**GREEDY, "max_new_tokens": 4, "ignore_eos": True},
                return_logprob=True, top_logprobs_num=3, return_text_in_logprobs=True)
    full = generate(server, logprob_start_len=0, **body)["meta_info"]
    inputs = full["input_token_logprobs"]
    assert [t[1] for t in inputs] == ids
    assert inputs[0][0] is None and all(isinstance(t[0], float) and t[0] <= 0 for t in inputs[1:])
    assert [t[2] for t in inputs] == [tokenizer.decode([i]) for i in ids]
    outs = full["output_token_logprobs"]
    assert len(outs) == 4
    for (lp, tid, _), top in zip(outs, full["output_top_logprobs"]):
        assert len(top) == 3 and [t[0] for t in top] == sorted((t[0] for t in top), reverse=True)
        assert tid == top[0][1] and abs(lp - top[0][0]) < 1e-4      # greedy takes the top token
    tail = generate(server, logprob_start_len=2, **body)["meta_info"]["input_token_logprobs"]
    assert [t[1] for t in tail] == ids[2:]
    for a, b in zip(tail, inputs[2:]):
        assert abs(a[0] - b[0]) < 1e-4                              # same positions, same logprobs


def test_n_samples_of_one_prompt(server):
    out = generate(server, text="Hello", sampling_params={"n": 3, "max_new_tokens": 3, "temperature": 1.0,
                                                          "ignore_eos": True})
    assert isinstance(out, list) and len(out) == 3
    assert all(len(o["output_ids"]) == 3 for o in out)


# ---- control routes ----

def test_model_and_server_info(server, tiny_llama):
    for path in ("/get_model_info", "/model_info"):
        info = server.get(path).json()
        assert info["model_path"] == str(tiny_llama) and info["tokenizer_path"] == str(tiny_llama)
        assert info["is_generation"] is True
    for path in ("/get_server_info", "/server_info"):
        info = server.get(path).json()
        assert info["max_total_num_tokens"] == 2048 and info["context_length"] == 256
        assert {"used_slots", "tree_slots", "free_slots", "num_running_reqs", "num_waiting_reqs"} <= set(info)
        assert "api_key" not in info


def _start_long_stream(server, rid: str, tokens: int = 240):
    """A streaming request that runs a while; returns (thread, events list, first-event flag)."""
    events, started = [], threading.Event()

    def run():
        body = {"input_ids": [5, 6, 7], "rid": rid, "stream": True,
                "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
        with server.post("/generate", json=body, stream=True) as r:
            for line in r.iter_lines(decode_unicode=True):
                if line:
                    events.append(line)
                    started.set()
        started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(60)
    return thread, events


def test_flush_cache_refused_while_running_then_empties_the_tree(server):
    generate(server, text="warm the tree", sampling_params={"max_new_tokens": 2})
    thread, events = _start_long_stream(server, "flush-blocker")
    r = server.post("/flush_cache")
    assert r.status_code == 400 and "running" in r.json()["error"]["message"]
    assert server.post("/abort_request", json={"rid": "flush-blocker"}).json()["success"] is True
    thread.join(30)
    server.wait_idle()
    r = server.post("/flush_cache", json={"empty_cache": True})
    assert r.status_code == 200, r.text
    info = server.server_info()
    assert info["tree_slots"] == 0 and info["used_slots"] == 0


def test_abort_request_ends_the_stream_with_abort(server):
    thread, events = _start_long_stream(server, "abort-me")
    assert server.post("/abort_request", json={"rid": "abort-me"}).status_code == 200
    thread.join(30)
    assert events[-1] == "data: [DONE]"
    last = json.loads(events[-2][6:])
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(last["output_ids"]) < 240
    info = server.wait_idle()
    assert info["used_slots"] == info["tree_slots"]


def test_health_generate(server):
    r = server.get("/health_generate")
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 1


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_metrics_count_what_was_generated(server):
    server.wait_idle()
    before = server.get("/metrics")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    out = generate(server, text="count me", sampling_params={"max_new_tokens": 7, "ignore_eos": True})
    after = server.get("/metrics").text
    gen = _metric(after, "radixlm_generation_tokens_total") - _metric(before.text, "radixlm_generation_tokens_total")
    prompt = _metric(after, "radixlm_prompt_tokens_total") - _metric(before.text, "radixlm_prompt_tokens_total")
    assert gen == out["meta_info"]["completion_tokens"] == 7
    assert prompt == out["meta_info"]["prompt_tokens"]
    count = "radixlm_time_to_first_token_seconds_count"
    assert _metric(after, count) == _metric(before.text, count) + 1
    assert _metric(after, "radixlm_inter_token_latency_seconds_count") >= 6
    for name in ("radixlm_num_running_reqs", "radixlm_num_queued_reqs", "radixlm_kv_usage", "radixlm_cache_hit_rate",
                 "radixlm_e2e_request_latency_seconds_count"):
        _metric(after, name)


def test_non_streaming_client_disconnect_aborts(server):
    before = server.wait_idle()
    body = json.dumps({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 250, "ignore_eos": True}})
    request = (f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(body)}\r\n\r\n{body}")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request.encode())
        deadline = time.monotonic() + 30
        while server.server_info()["decode_tokens"] == before["decode_tokens"]:   # it is decoding
            assert time.monotonic() < deadline
            time.sleep(0.02)
    after = server.wait_idle()
    assert after["used_slots"] == after["tree_slots"]
    assert after["received"] == before["received"] + 1
    assert after["decode_tokens"] - before["decode_tokens"] < 240      # stopped early: aborted
