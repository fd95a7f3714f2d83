"""While a 10 MB body and a huge-logprob request are refused or served, a concurrent stream is served
exactly as it is alone, and /health answers 200 throughout (issue 16: the main loop once tokenized the
10 MB prompt and built the multi-megabyte logprob response itself, and the detokenizer decoded that
response's logprobs into Python objects, stalling every stream for seconds).

Oracles: the same greedy stream run alone first (its events' token ids and text, in order), and the
huge requests' own shapes (the refusal's reason; 12 parts with 200 input logprobs of 64 alternatives).
How long the stream pauses is not asserted (tests never assert on wall-clock speed); bench/ measures it.
"""

import json
import threading

import requests

FILLER = "All work and no play makes Jack a dull boy. "
STREAM = {"input_ids": [11, 12, 13, 14, 15], "stream": True,
          "sampling_params": {"max_new_tokens": 240, "temperature": 0, "ignore_eos": True}}
# the largest logprob response the server serves: 250 positions x (1 + 64 alternatives) x n=12 =
# 195,000 entries (the bound is 200,000), about 10 MB of JSON built in the main process
HUGE_LOGPROBS = {"input_ids": [5] * 200, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 64,
                 "sampling_params": {"max_new_tokens": 50, "n": 12, "ignore_eos": True}}
TEN_MB = {"text": FILLER * 230_000, "sampling_params": {"max_new_tokens": 1}}


def _stream(server, first=None) -> dict:
    """The native stream's final event (its output ids, text and finish), checked to grow event by event;
    first: an Event set when the first token event arrives."""
    r = requests.post(server.url + "/generate", json=STREAM, headers=server.headers, stream=True, timeout=300)
    assert r.status_code == 200, r.text
    events = []
    with r:
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            events.append(json.loads(line[6:]))
            if first is not None:
                first.set()
    ids = [e["output_ids"] for e in events]
    assert all(b[:len(a)] == a for a, b in zip(ids, ids[1:])), "a stream event lost or changed earlier tokens"
    return {k: events[-1][k] for k in ("output_ids", "text")} | {"finish": events[-1]["meta_info"]["finish_reason"]}


def _under_load(server, bodies: dict) -> tuple:
    """(the stream alone, the stream while bodies were sent, {name: response}, /health statuses meanwhile)."""
    alone = _stream(server)
    first, done, results, health = threading.Event(), threading.Event(), {}, []

    def send(name, body):
        results[name] = server.post("/generate", json=body, timeout=300)

    def load():
        first.wait(60)
        senders = [threading.Thread(target=send, args=item) for item in bodies.items()]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        done.set()

    def poll_health():
        first.wait(60)
        while not done.is_set() or not health:
            health.append(requests.get(server.url + "/health", timeout=60).status_code)

    threads = [threading.Thread(target=load, daemon=True), threading.Thread(target=poll_health, daemon=True)]
    for t in threads:
        t.start()
    loaded = _stream(server, first)
    for t in threads:
        t.join(300)
    return alone, loaded, results, health


def test_a_stream_is_served_as_alone_while_a_10mb_body_is_refused(server):
    alone, loaded, results, health = _under_load(server, {"10mb": TEN_MB})
    assert results["10mb"].status_code == 400 and "characters" in results["10mb"].json()["error"]["message"]
    assert loaded == alone and len(alone["output_ids"]) == STREAM["sampling_params"]["max_new_tokens"]
    assert health and set(health) == {200}


def _check_huge(results) -> None:
    assert results["10mb"].status_code == 400 and "characters" in results["10mb"].json()["error"]["message"]
    served = results["logprobs"]
    assert served.status_code == 200, served.text[:500]
    outs = served.json()
    assert len(outs) == 12 and all(len(o["meta_info"]["input_token_logprobs"]) == 200 for o in outs)
    assert all(len(o["meta_info"]["output_top_logprobs"][0]) == 64 for o in outs)
    assert all(len(o["meta_info"]["input_top_logprobs"][1]) == 64 for o in outs)


def test_a_stream_is_served_as_alone_while_huge_requests_are_refused_and_served(server):
    """The detokenizer passes the huge request's input logprobs on as raw msgpack (io.with_raw_field) and
    the main process decodes the message part by part: the concurrent stream's events and the 12 parts
    all arrive whole."""
    alone, loaded, results, health = _under_load(server, {"10mb": TEN_MB, "logprobs": HUGE_LOGPROBS})
    _check_huge(results)
    assert loaded == alone
    assert health and set(health) == {200}
