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


def _violations_metric(server) -> float:
    for line in server.get("/metrics").text.splitlines():
        if line.startswith("radixlm_constrained_output_violations_total "):
            return float(line.split()[1])
    raise AssertionError("no radixlm_constrained_output_violations_total in /metrics")


def test_pattern_with_max_length_is_enforced_and_checked(server):
    """XGrammar alone dropped maxLength beside a pattern; the schema is now rewritten into one bounded pattern,
    so every finished answer satisfies both (oracle: jsonschema) and the output check flags none."""
    import jsonschema

    schema = {"type": "string", "pattern": "^[a-z]{1,8}$", "maxLength": 2}   # XGrammar alone drops maxLength here
    before = _violations_metric(server)
    flagged = judged = 0
    for seed in range(12):
        r = _generate(server, {"json_schema": json.dumps(schema), "temperature": 1.0, "seed": seed,
                               "max_new_tokens": 24})
        assert r.status_code == 200, r.text
        out = r.json()
        reason = out["meta_info"]["finish_reason"]
        if reason["type"] != "stop":
            continue
        judged += 1
        valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(out["text"]))
        assert ("schema_violation" in reason) == (not valid), (out["text"], reason)
        flagged += not valid
    assert judged >= 6, f"only {judged} of 12 outputs finished with stop"
    assert flagged == 0, "an answer broke maxLength: the rewrite into one pattern did not hold"
    assert _violations_metric(server) - before == flagged
