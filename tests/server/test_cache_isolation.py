"""Cache isolation: the PIN-guessing attack through `cached_tokens`, and rids scoped per API key.

The attack: a victim's prompt ends in a 4-digit PIN; the attacker sends the victim's prefix plus a
guessed digit plus one probe token and reads usage.prompt_tokens_details.cached_tokens: one more
cached token means the digit is right.  Digit by digit, at most 40 requests.  Oracles: the victim's
PIN (recovered in the shared namespace, so the test can fail) and the tokenizer's prompt lengths.
"""

import threading
import time
import uuid

import pytest
import requests
from server_harness import ServerProcess

KEY_A, KEY_B = "sk-alice-0123", "sk-mallory-4567"
PIN = [4, 8, 2, 1]
LONG = {"temperature": 0, "max_new_tokens": 180, "ignore_eos": True}
SHORT = {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}


@pytest.fixture(scope="module")
def keyed(tiny_llama, tmp_path_factory):
    """A server with two keys and --cache-isolation per-key."""
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("logs"), "--check-ledger", "--cache-isolation",
                        "per-key", api_key=f"{KEY_A},{KEY_B}").wait_ready()
    yield srv
    assert srv.proc.poll() is None, f"the keyed server died:\n{srv.log()[-4000:]}"
    srv.stop()


def _digit_ids(tokenizer) -> list:
    ids = [tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
    assert len(set(ids)) == 10 and all(isinstance(i, int) for i in ids)
    return ids


def _complete(url, key, prompt, salt=None, max_tokens=1) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    r = requests.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def _victim_prefix(tokenizer) -> list:
    """A prefix no other test has cached: 'Alice-<random>'s bank PIN is '."""
    return tokenizer.encode(f"Alice-{uuid.uuid4().hex[:6]}'s bank PIN is ")


def _guess_pin(url, key, tokenizer, prefix, salt=None) -> list:
    """The digits recovered from cached_tokens, stopping at the first position where no guess stands out."""
    digits, probe = _digit_ids(tokenizer), tokenizer.encode("?")
    known = []
    for _ in range(len(PIN)):
        base = len(prefix) + len(known)
        cached = [_complete(url, key, prefix + known + [digits[d]] + probe, salt)["prompt_tokens_details"]
                  ["cached_tokens"] for d in range(10)]
        assert max(cached) <= base + 1, cached      # nothing past the guessed digit can be cached
        hits = [d for d in range(10) if cached[d] == base + 1]
        if len(hits) != 1:
            break
        known.append(digits[hits[0]])
    return [digits.index(t) for t in known]


def _plant(url, key, tokenizer, salt=None) -> list:
    prefix = _victim_prefix(tokenizer)
    usage = _complete(url, key, prefix + [_digit_ids(tokenizer)[d] for d in PIN], salt)
    assert usage["prompt_tokens"] == len(prefix) + len(PIN)
    return prefix


# ---- one key: cache_salt ----

@pytest.mark.parametrize("victim_salt, attacker_salt, leaks", [
    (None, None, True),                   # no isolation: the attack works, so this test can fail
    ("alice-salt", "alice-salt", True),   # the same salt shares the cache on purpose
    ("alice-salt", None, False),
    ("alice-salt", "mallory-salt", False),
    (None, "mallory-salt", False),
])
def test_pin_guessing_through_cached_tokens_needs_a_shared_salt(server, tokenizer, victim_salt, attacker_salt,
                                                                 leaks):
    prefix = _plant(server.url, server.api_key, tokenizer, victim_salt)
    recovered = _guess_pin(server.url, server.api_key, tokenizer, prefix, attacker_salt)
    assert recovered == (PIN if leaks else []), recovered


def test_chat_cache_salt_namespaces_the_cache(server):
    headers = server.headers
    messages = [{"role": "user", "content": f"My PIN is 4821, note {uuid.uuid4().hex[:8]}"}]

    def cached(salt):
        body = {"messages": messages, "max_tokens": 1, "temperature": 0, "cache_salt": salt}
        r = requests.post(server.url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        return u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"]

    assert cached("s1")[0] == 0
    hit, prompt_tokens = cached("s1")
    assert hit == prompt_tokens - 1            # all but the last prompt token, whose logits are needed
    assert cached("s2")[0] == 0
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": messages, "cache_salt": ""},
                      headers=headers, timeout=60)
    assert r.status_code == 400 and "cache_salt" in r.json()["error"]["message"]


# ---- several keys, --cache-isolation per-key ----

@pytest.mark.parametrize("attacker_key, salt, leaks", [
    (KEY_A, None, True),           # the victim's own key: one namespace, the attack works
    (KEY_B, None, False),
    (KEY_B, "shared-salt", False),  # the same salt under another key is still another namespace
])
def test_pin_guessing_across_keys_recovers_nothing_with_per_key_isolation(keyed, tokenizer, attacker_key, salt,
                                                                          leaks):
    prefix = _plant(keyed.url, KEY_A, tokenizer, salt)
    recovered = _guess_pin(keyed.url, attacker_key, tokenizer, prefix, salt)
    assert recovered == (PIN if leaks else []), recovered


def _post(srv, key, path, body, timeout=120):
    return requests.post(srv.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def test_every_key_is_accepted_and_others_are_refused(keyed):
    body = {"input_ids": [5, 6, 7], "sampling_params": SHORT}
    outs = [_post(keyed, k, "/generate", body) for k in (KEY_A, KEY_B)]
    assert [r.status_code for r in outs] == [200, 200]
    assert outs[0].json()["output_ids"] == outs[1].json()["output_ids"]    # greedy: the same model
    bad = _post(keyed, "sk-nobody", "/generate", body)
    assert bad.status_code == 401 and "invalid API key" in bad.json()["error"]["message"]


def test_rids_are_scoped_per_key(keyed):
    victim = {}
    body = {"input_ids": list(range(40, 100)), "rid": "shared-rid", "sampling_params": LONG}
    thread = threading.Thread(target=lambda: victim.setdefault("r", _post(keyed, KEY_A, "/generate", body)))
    thread.start()
    deadline = time.monotonic() + 30
    while requests.get(keyed.url + "/server_info", headers={"Authorization": f"Bearer {KEY_A}"},
                       timeout=30).json()["num_running_reqs"] == 0:
        assert thread.is_alive() and time.monotonic() < deadline, "the victim never started"
        time.sleep(0.02)
    mine = [7, 8, 9]
    reference = _post(keyed, KEY_B, "/generate", {"input_ids": mine, "sampling_params": SHORT}).json()["output_ids"]
    other = _post(keyed, KEY_B, "/generate", {"input_ids": mine, "rid": "shared-rid", "sampling_params": SHORT})
    assert other.status_code == 200, other.text
    assert other.json()["output_ids"] == reference and other.json()["meta_info"]["prompt_tokens"] == len(mine)
    same = _post(keyed, KEY_A, "/generate", {"input_ids": mine, "rid": "shared-rid", "sampling_params": SHORT})
    assert same.status_code == 400 and "already in use" in same.json()["error"]["message"]
    abort = _post(keyed, KEY_B, "/abort_request", {"rid": "shared-rid"})
    assert abort.status_code == 200 and abort.json() == {"success": False, "aborted": []}
    abort_all = _post(keyed, KEY_B, "/abort_request", {"abort_all": True})
    assert abort_all.json()["aborted"] == []
    thread.join(120)
    out = victim["r"]
    assert out.status_code == 200, out.text
    assert out.json()["meta_info"]["finish_reason"]["type"] == "length"
    assert out.json()["meta_info"]["completion_tokens"] == LONG["max_new_tokens"]


# ---- /v1/responses: the same namespaces as the chat route, and stored responses per key ----

def _respond(srv, key, text, salt=None, **extra) -> dict:
    body = {"input": text, "max_output_tokens": 1, "temperature": 0, **extra}
    if salt is not None:
        body["cache_salt"] = salt
    r = _post(srv, key, "/v1/responses", body)
    assert r.status_code == 200, r.text
    return r.json()


def _responses_cached(srv, key, text, salt=None) -> tuple:
    usage = _respond(srv, key, text, salt)["usage"]
    return usage["input_tokens_details"]["cached_tokens"], usage["input_tokens"]


def _unseen(cached: int, prompt_tokens: int) -> bool:
    """The text (a fresh nonce first) was not cached in this namespace: at most the chat template's
    header before it can be, which other tests' requests share (a hit is prompt_tokens - 1)."""
    return cached < prompt_tokens // 2


def test_responses_cache_salt_namespaces_the_cache(server):
    text = f"{uuid.uuid4().hex[:8]}: my PIN is 4821"
    s1, s2 = f"s1-{uuid.uuid4().hex[:6]}", f"s2-{uuid.uuid4().hex[:6]}"
    assert _unseen(*_responses_cached(server, server.api_key, text, s1))
    hit, prompt_tokens = _responses_cached(server, server.api_key, text, s1)
    assert hit == prompt_tokens - 1            # the salt is kept: the same salt shares the cache
    assert _unseen(*_responses_cached(server, server.api_key, text, s2))
    assert _unseen(*_responses_cached(server, server.api_key, text))     # nor is the unsalted namespace
    r = _post(server, server.api_key, "/v1/responses", {"input": text, "cache_salt": ""})
    assert r.status_code == 400 and "cache_salt" in r.json()["error"]["message"]


def test_responses_namespace_per_key_under_per_key_isolation(keyed):
    text = f"{uuid.uuid4().hex[:8]}: Alice's bank PIN is 4821"
    assert _unseen(*_responses_cached(keyed, KEY_A, text))
    hit, prompt_tokens = _responses_cached(keyed, KEY_A, text)
    assert hit == prompt_tokens - 1            # her own key: her cache
    assert _unseen(*_responses_cached(keyed, KEY_B, text))
    assert _unseen(*_responses_cached(keyed, KEY_B, text, "shared"))


def test_a_stored_response_is_invisible_to_another_key(keyed):
    secret = f"The launch code is {uuid.uuid4().hex[:8]}"
    resp = _respond(keyed, KEY_A, secret)
    rid = resp["id"]
    got = requests.get(f"{keyed.url}/v1/responses/{rid}", headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30)
    assert got.status_code == 404 and secret not in got.text
    follow = _post(keyed, KEY_B, "/v1/responses", {"input": "repeat everything above", "previous_response_id": rid,
                                                   "max_output_tokens": 1})
    assert follow.status_code == 400 and follow.json()["error"]["code"] == "previous_response_not_found"
    gone = requests.delete(f"{keyed.url}/v1/responses/{rid}", headers={"Authorization": f"Bearer {KEY_B}"},
                           timeout=30)
    assert gone.status_code == 404
    mine = requests.get(f"{keyed.url}/v1/responses/{rid}", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert mine.status_code == 200 and mine.json()["id"] == rid     # still there for its own key
    usage = _respond(keyed, KEY_A, "and then?", previous_response_id=rid)["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] > 0       # its chain continues, from the cache
