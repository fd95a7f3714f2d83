"""OpenAI details that SGLang's kits and the SDK check (issue 17 item 6), on the shared tiny-model server:
response_format json_object gives an object, matched_stop in each choice, stop_token_ids outside the
vocabulary ignored, n > 1 with a seed gives distinct choices reproducible as a set, and logprob bytes
are a token's raw bytes."""

import json

PROMPT = "The quick brown fox"


def completion(server, **body):
    r = server.post("/v1/completions", json={"model": "default", "prompt": PROMPT, **body})
    assert r.status_code == 200, r.text
    return r.json()


def chat(server, **body):
    r = server.post("/v1/chat/completions",
                    json={"model": "default", "messages": [{"role": "user", "content": "Hi there"}], **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_json_object_is_an_object(server):
    for seed in range(6):
        out = chat(server, response_format={"type": "json_object"}, max_tokens=40, temperature=1.0, seed=seed)
        choice = out["choices"][0]
        text = choice["message"]["content"]
        assert text.lstrip().startswith("{"), text
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict), text


def test_matched_stop_names_the_stop_string(server):
    free = completion(server, max_tokens=12, temperature=0)["choices"][0]
    assert free["finish_reason"] == "length" and free["matched_stop"] is None
    text = free["text"]
    assert len(text) >= 6, text
    stop = text[3:5]
    cut = completion(server, max_tokens=12, temperature=0, stop=[stop, "\u2603never"])["choices"][0]
    assert cut["finish_reason"] == "stop" and cut["matched_stop"] == stop
    assert cut["text"] == text[:text.index(stop)]
    streamed = server.post("/v1/completions", json={"model": "default", "prompt": PROMPT, "max_tokens": 12,
                                                    "temperature": 0, "stop": [stop], "stream": True})
    events = [json.loads(line[5:]) for line in streamed.text.splitlines()
              if line.startswith("data:") and line.strip() != "data: [DONE]"]
    finals = [c for e in events for c in e["choices"] if c.get("finish_reason")]
    assert [c["matched_stop"] for c in finals] == [stop]


def test_stop_token_ids_outside_the_vocabulary_are_ignored(server, tokenizer):
    plain = completion(server, max_tokens=8, temperature=0)["choices"][0]["text"]
    far = completion(server, max_tokens=8, temperature=0, stop_token_ids=[len(tokenizer) + 10, 10 ** 9])
    assert far["choices"][0]["text"] == plain


def test_n_with_seed_gives_distinct_choices_reproducible_as_a_set(server):
    body = dict(max_tokens=10, temperature=1.0, seed=1234, n=3)
    first = [c["text"] for c in completion(server, **body)["choices"]]
    again = [c["text"] for c in completion(server, **body)["choices"]]
    assert len(set(first)) == 3, first
    assert sorted(first) == sorted(again)
    other = [c["text"] for c in completion(server, **{**body, "seed": 99})["choices"]]
    assert set(other) != set(first)


def test_logprob_bytes_are_raw_token_bytes(server, tokenizer):
    """A regex forces "é日本" (each character split over byte tokens in the tiny vocabulary): every token's
    `token` is U+FFFD, while the bytes of the tokens concatenate to the text's UTF-8."""
    target = "é日本"
    assert len(tokenizer.encode(target, add_special_tokens=False)) > len(target)
    out = chat(server, regex=target, max_tokens=16, temperature=0, logprobs=True, top_logprobs=2)
    choice = out["choices"][0]
    assert choice["message"]["content"] == target
    entries = [e for e in choice["logprobs"]["content"] if e["token"] != tokenizer.eos_token]
    raw = b"".join(bytes(e["bytes"]) for e in entries)
    assert raw == target.encode("utf-8")
    assert any(e["token"] == "\ufffd" for e in entries)
    assert all(bytes(e["bytes"]) != "\ufffd".encode() for e in entries)
