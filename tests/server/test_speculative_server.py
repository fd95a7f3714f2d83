"""--speculative-algorithm ngram through a real server: greedy answers equal a plain server's, streamed
and not, native and OpenAI; meta_info carries spec_verify_ct and spec_accept_length; /server_info and
/metrics carry the totals; "speculative": false opts a request out."""

import json

import pytest
from server_harness import ServerProcess

PROMPT = [11, 12, 13, 14, 15, 16, 17, 18] * 6


@pytest.fixture(scope="module")
def spec_server(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("spec"), "--check-ledger", "--speculative-algorithm",
                        "ngram", "--speculative-num-draft-tokens", "5").wait_ready()
    yield srv
    assert srv.stop() == 0


def _native(srv, ids, stream=False, **params):
    body = {"input_ids": ids, "stream": stream,
            "sampling_params": {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True, **params}}
    r = srv.post("/generate", json=body, stream=stream)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()
    events = [json.loads(line[len(b"data: "):]) for line in r.iter_lines()
              if line.startswith(b"data: ") and line != b"data: [DONE]"]
    return events[-1]


def test_greedy_answers_equal_the_plain_server(server, spec_server):
    plain = _native(server, PROMPT)
    spec = _native(spec_server, PROMPT)
    streamed = _native(spec_server, PROMPT, stream=True)
    assert spec["output_ids"] == plain["output_ids"] == streamed["output_ids"]
    meta = spec["meta_info"]
    assert meta["spec_verify_ct"] > 0 and meta["spec_accept_length"] > 1.0, meta
    assert meta["forward_passes"] < meta["completion_tokens"], meta
    assert "spec_verify_ct" not in plain["meta_info"]
    model = server.get("/v1/models").json()["data"][0]["id"]
    body = {"model": model, "prompt": [PROMPT], "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    a, b = (srv.post("/v1/completions", json=body) for srv in (server, spec_server))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert a.json()["choices"][0]["text"] == b.json()["choices"][0]["text"]


def test_opt_out_totals_and_metrics(spec_server):
    before = spec_server.server_info()
    out = _native(spec_server, PROMPT[3:], speculative=False)
    assert out["meta_info"]["spec_verify_ct"] == 0
    assert spec_server.server_info()["spec_verify_passes"] == before["spec_verify_passes"]
    _native(spec_server, PROMPT[5:])
    info = spec_server.server_info()
    assert info["spec_verify_passes"] > before["spec_verify_passes"]
    assert 0 < info["spec_accepted_tokens"] <= info["spec_draft_tokens"]
    metrics = spec_server.get("/metrics").text
    assert "radixlm_spec_accepted_tokens" in metrics and "radixlm_spec_accept_length" in metrics
    bad = spec_server.post("/generate", json={"input_ids": PROMPT, "sampling_params": {"speculative": "no"}})
    assert bad.status_code == 400 and "speculative" in bad.text
