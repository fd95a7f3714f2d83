"""bench/step_host.py's core: the real Scheduler and ModelRunner loop with the null-cost model in place of
the runner's model. Oracle: the model's fixed logits say which token each batch row must get (greedy
is their argmax), so every output token is the argmax of one row of the table, the same row for the
whole request, and the two requests get different rows; with a JSON schema the text stays inside the
schema's string (the table ranks quotes last) and the null model still served every forward."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "step_host.py"


@pytest.fixture(scope="module")
def step_host():
    spec = importlib.util.spec_from_file_location("step_host_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def folder(step_host, tmp_path_factory):
    return step_host.make_model_folder(str(tmp_path_factory.mktemp("step-host")))


def test_outputs_are_the_argmax_of_the_fixed_logits(step_host, folder):
    out, logits = step_host.run_outputs(folder, batch=2, grammar=False, max_new_tokens=6)
    picks = logits.argmax(-1).tolist()[:2]                  # row 0's and row 1's greedy token
    assert picks[0] != picks[1]                              # the rows are told apart
    assert sorted(out) == ["r0", "r1"] and all(len(t) == 6 for t in out.values())
    rows = sorted(picks.index(t[0]) for t in out.values() if t[0] in picks)
    assert rows == [0, 1]                                     # each request one row, both rows used
    for tokens in out.values():
        assert tokens == [tokens[0]] * 6


def test_json_schema_outputs_stay_in_the_string(step_host, folder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    out, logits = step_host.run_outputs(folder, batch=2, grammar=True, max_new_tokens=16)
    picks = logits.argmax(-1).tolist()[:2]
    for tokens in out.values():
        text = tok.decode(tokens)
        head, _, value = text.partition('"text": "')
        assert head.rstrip() == "{" and value and '"' not in value and "\\" not in value, text   # indented or not
        assert json.loads(text + '"}') == {"text": value}
        assert tokens[-1] in picks                             # free text: the row's argmax again


def test_measure_reports_steady_decode_steps(step_host, folder):
    row = step_host.measure(folder, batch=2, grammar=False, steps=4, warmup=1)
    assert row["steps"] == 4 and 0 < row["min_ms"] <= row["median_ms"] <= row["p90_ms"]
    assert row["forwards"] >= 1 + 1 + 4                       # prefill, warm-up and measured steps all forwarded


def test_virtual_device_holds_each_grammar_step(step_host, folder):
    """--device-ms: a grammar step collects the forward before it, so no step is shorter than the device's
    time for one forward (less the little host time after that forward's launch)."""
    row = step_host.measure(folder, batch=2, grammar=True, steps=3, warmup=1, device_ms=40)
    assert row["min_ms"] >= 30, row
