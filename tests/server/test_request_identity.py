"""Request identity: the client's rid is only a label; the server keys every request on its own id.
The attack: a victim runs a request with a secret prompt; an attacker sends the same rid (or the
rid of one of the victim's n > 1 parts).  The attacker gets a 400 or its own output only, and the
victim completes normally.  Oracles: prompt lengths in meta_info and greedy reference runs."""

import threading

import requests

VICTIM_RID = "victim-rid"
SECRET = list(range(40, 100))              # the victim's 60-token "secret" prompt
ATTACK = [7, 8, 9]
LONG = {"temperature": 0, "max_new_tokens": 180, "ignore_eos": True}
SHORT = {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}


def _start_victim(server, body) -> tuple:
    result = {}

    def run():
        result["response"] = server.post("/generate", json=body, timeout=120)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _wait_running(server, thread):
    import time
    deadline = time.monotonic() + 30
    while server.server_info()["num_running_reqs"] == 0:
        assert thread.is_alive() and time.monotonic() < deadline, "the victim never started"
        time.sleep(0.02)


def _own_output(r, prompt, reference):
    """A label no request in flight holds is served: the answer is the attacker's own greedy run."""
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["meta_info"]["prompt_tokens"] == len(prompt), "the attacker got another request's state"
    assert out["output_ids"] == reference


def test_same_rid_as_a_victims_n_samples_gets_a_400_and_the_victim_completes(server):
    reference = server.post("/generate", json={"input_ids": ATTACK, "sampling_params": SHORT}).json()["output_ids"]
    thread, result = _start_victim(server, {"input_ids": SECRET, "rid": VICTIM_RID,
                                            "sampling_params": {**LONG, "n": 2}})
    _wait_running(server, thread)
    # the same rid, with n = 2 so its parts would be named like the victim's parts
    r = server.post("/generate", json={"input_ids": ATTACK, "rid": VICTIM_RID, "sampling_params": {**SHORT, "n": 2}},
                    timeout=60)
    assert r.status_code == 400, r.text
    assert "already in use" in r.json()["error"]["message"]
    # the rid of one of the victim's parts: the victim holds only its own label (its parts' names are
    # made from it), so this one is free and the attacker gets its own output, never the part's
    r = server.post("/generate", json={"input_ids": ATTACK, "rid": VICTIM_RID + "-0", "sampling_params": SHORT},
                    timeout=60)
    _own_output(r, ATTACK, reference)
    thread.join(120)
    assert not thread.is_alive(), "the victim's request stalled"
    victim = result["response"]
    assert victim.status_code == 200, victim.text
    outs = victim.json()
    assert [o["meta_info"]["id"] for o in outs] == [VICTIM_RID + "-0", VICTIM_RID + "-1"]
    for out in outs:
        assert out["meta_info"]["prompt_tokens"] == len(SECRET)
        assert out["meta_info"]["completion_tokens"] == LONG["max_new_tokens"]
        assert out["meta_info"]["finish_reason"]["type"] == "length"
    # the label is free again once the victim is done
    again = server.post("/generate", json={"input_ids": ATTACK, "rid": VICTIM_RID, "sampling_params": SHORT})
    assert again.status_code == 200 and again.json()["output_ids"] == reference


def test_same_rid_as_a_victims_stream_is_refused_and_the_stream_completes(server):
    body = {"input_ids": SECRET, "rid": "stream-victim", "stream": True, "sampling_params": LONG}
    with requests.post(server.url + "/generate", json=body, headers=server.headers, stream=True, timeout=120) as vr:
        assert vr.status_code == 200
        lines = vr.iter_lines()
        first = next(line for line in lines if line)
        assert first.startswith(b"data: {")
        for attack in ({"input_ids": ATTACK, "rid": "stream-victim", "sampling_params": SHORT},
                       {"input_ids": [ATTACK], "rid": ["stream-victim"], "sampling_params": SHORT, "stream": True}):
            r = server.post("/generate", json=attack, timeout=60)
            assert r.status_code == 400 and "already in use" in r.json()["error"]["message"], r.text
        rest = [line for line in lines if line]
    assert rest[-1] == b"data: [DONE]"
    import json
    final = json.loads(rest[-2][6:])
    assert final["meta_info"]["id"] == "stream-victim"
    assert final["meta_info"]["completion_tokens"] == LONG["max_new_tokens"]
