"""Grammars that would hang or starve the scheduler, sent to a real server: each gets a bounded answer
and the server keeps serving everyone else (the oracle: a plain request answered afterwards, and the
shared server's --check-ledger and liveness checked at the end of the session)."""

import json

import pytest
import requests

RECURSIVE_SCHEMA = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}},
                                    "required": ["c"]}}, "$ref": "#/$defs/n"}


def _generate(server, sampling_params, timeout=120):
    body = {"text": "Say something.", "sampling_params": {"max_new_tokens": 12, **sampling_params}}
    return requests.post(server.url + "/generate", json=body, headers=server.headers, timeout=timeout)


@pytest.mark.parametrize("params", [{"json_schema": json.dumps(RECURSIVE_SCHEMA)}, {"ebnf": 'root ::= "ab" root'}],
                         ids=["recursive-schema", "recursive-ebnf"])
def test_grammar_without_finite_output_is_refused(server, params):
    r = _generate(server, params)
    assert r.status_code == 400, r.text
    assert "no finite output" in r.json()["error"]["message"]
    ok = _generate(server, {"temperature": 0})
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] >= 1


def test_dead_branch_grammar_decodes_to_a_bounded_output(server):
    r = _generate(server, {"ebnf": 'root ::= "b" x | "a"\nx ::= "c" x', "temperature": 0})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["text"] == "a" or (out["text"].startswith("b") and set(out["text"][1:]) <= {"c"}), out["text"]
    assert out["meta_info"]["completion_tokens"] <= 12
