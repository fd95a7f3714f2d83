"""The OpenAI routes refuse huge chat and completion bodies by their cheap bounds (characters, message
counts: the message names which) or after rendering and tokenizing them on the tokenizer thread, while
/health keeps answering 200.  Oracles: each refusal's reason, and the tokenizer's own ids for bodies
within the bounds.  How fast /health answers meanwhile is bench/'s to measure, not a test's."""

import threading
import time

import pytest
import requests

FILLER = "All work and no play makes Jack a dull boy. "


def _while_health(server, path, body) -> tuple:
    """(response, /health statuses while the request ran)."""
    result, statuses = {}, []

    def big():
        result["r"] = server.post(path, json=body, timeout=300)

    thread = threading.Thread(target=big, daemon=True)
    thread.start()
    while thread.is_alive() or not statuses:
        statuses.append(requests.get(server.url + "/health", timeout=60).status_code)
        time.sleep(0.01)
    thread.join()
    return result["r"], statuses


CASES = {
    "one 10 MB chat message": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": FILLER * 230_000}], "max_tokens": 1}, "characters"),
    "100,000 chat messages": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}] * 100_000, "max_tokens": 1}, "messages cannot fit"),
    "a chat that renders to too many tokens": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}] * 200, "max_tokens": 1}, "does not fit"),
    "a 10 MB completion prompt": ("/v1/completions", {"prompt": FILLER * 230_000, "max_tokens": 1}, "characters"),
    "1,000 completion prompts of 8,000 characters": ("/v1/completions", {
        "prompt": [FILLER * 180] * 1000, "max_tokens": 1}, "does not fit"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_huge_openai_bodies_leave_health_answering(server, case):
    path, body, words = CASES[case]
    r, statuses = _while_health(server, path, body)
    assert r.status_code == 400, r.text[:500]
    assert words in r.json()["error"]["message"], r.json()
    assert set(statuses) == {200}, statuses


def test_bodies_within_the_bounds_are_served_with_the_tokenizers_ids(server, tokenizer):
    messages = [{"role": "user", "content": f"hi {i}"} for i in range(8)]
    r = server.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert r.json()["usage"]["prompt_tokens"] == len(tokenizer.encode(rendered, add_special_tokens=False))
    prompts = [f"{i} " + FILLER * 5 for i in range(20)]      # over 4,096 characters: tokenized off the loop
    r = server.post("/v1/completions", json={"prompt": prompts, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == sum(len(tokenizer.encode(p)) for p in prompts)


def test_long_prompt_lists_are_refused_before_parsing_with_their_reason(server):
    r = server.post("/v1/completions", json={"prompt": [[5] * 300], "max_tokens": 1})
    assert r.status_code == 400 and "prompt 0 has 300 tokens" in r.json()["error"]["message"]
    r = server.post("/v1/completions", json={"prompt": [5] * 300, "max_tokens": 1})
    assert r.status_code == 400 and "300 tokens" in r.json()["error"]["message"]
    r = server.post("/v1/completions", json={"prompt": ["a"] * 1025, "max_tokens": 1})
    assert r.status_code == 400 and "1025 prompts" in r.json()["error"]["message"]
    r = server.post("/v1/completions", json={"prompt": ["a b"] * 300, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200 and len(r.json()["choices"]) == 300     # many short text prompts are fine
    parts = [{"type": "text", "text": ""}] * 300
    r = server.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}]})
    assert r.status_code == 400 and "300 content parts" in r.json()["error"]["message"]
