"""SamplingParams: SGLang names/defaults, from_dict type checks, verify range checks."""

import json
import subprocess
import sys

import pytest

from radixlm.runtime.sampling_params import SamplingParams


def test_defaults_match_sglang():
    p = SamplingParams()
    assert (p.max_new_tokens, p.min_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (
        128, 0, 1.0, 1.0, -1, 0.0)
    assert (p.repetition_penalty, p.frequency_penalty, p.presence_penalty) == (1.0, 0.0, 0.0)
    assert (p.stop, p.stop_token_ids, p.ignore_eos, p.skip_special_tokens) == (
        None, None, False, True)
    assert (p.spaces_between_special_tokens, p.no_stop_trim, p.n, p.seed) == (
        True, False, 1, None)
    assert (p.json_schema, p.regex, p.ebnf, p.jump_forward, p.logit_bias) == (
        None, None, None, True, None)
    assert SamplingParams.from_dict(None) == p == SamplingParams.from_dict({})


GOOD = [
    ({"max_new_tokens": 0}, {"max_new_tokens": 0}),
    ({"temperature": 0}, {"temperature": 0.0}),  # int accepted where float expected
    ({"stop": "###"}, {"stop": ["###"]}),
    ({"stop": ["a", "bc"]}, {"stop": ["a", "bc"]}),
    ({"sampling_seed": 7}, {"seed": 7}),
    ({"seed": 7, "sampling_seed": 7}, {"seed": 7}),
    ({"max_new_tokens": None, "stop": None}, {"max_new_tokens": 128, "stop": None}),
    ({"json_schema": {"type": "object"}}, {"json_schema": '{"type": "object"}'}),
    ({"logit_bias": {"5": -1, 7: 2.5}}, {"logit_bias": {5: -1.0, 7: 2.5}}),
    ({"n": 4, "temperature": 0.0}, {"n": 4}),
    ({"top_p": 1, "top_k": 1, "min_p": 1.0}, {"top_p": 1.0, "top_k": 1}),
    ({"min_new_tokens": 5, "max_new_tokens": 5}, {"min_new_tokens": 5}),
    ({"frequency_penalty": -2, "presence_penalty": 2}, {"presence_penalty": 2.0}),
    ({"regex": r"\d+", "stop_token_ids": [0, 99]}, {"stop_token_ids": [0, 99]}),
]


@pytest.mark.parametrize("d,expected", GOOD)
def test_good_dicts(d, expected):
    p = SamplingParams.from_dict(d)
    p.verify(vocab_size=100)
    for k, v in expected.items():
        assert getattr(p, k) == v and type(getattr(p, k)) is type(v)


BAD = [
    ({"max_tokens": 5, "foo": 1}, "unknown sampling parameter(s): foo, max_tokens"),
    ({"max_tokens": 5}, "accepted names are:"),
    ({"max_new_tokens": -1}, "max_new_tokens must be >= 0"),
    ({"max_new_tokens": "abc"}, "max_new_tokens must be an integer, got 'abc'"),
    ({"max_new_tokens": True}, "max_new_tokens must be an integer"),
    ({"max_new_tokens": 3.0}, "max_new_tokens must be an integer"),
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"temperature": float("nan")}, "temperature must be >= 0"),
    ({"ignore_eos": 1}, "ignore_eos must be a boolean"),
    ({"top_p": 0}, "top_p must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"top_k": 0}, "top_k must be -1 (off) or >= 1"),
    ({"min_p": 1.5}, "min_p must be in [0, 1]"),
    ({"repetition_penalty": 0}, "repetition_penalty must be > 0"),
    ({"frequency_penalty": 2.5}, "frequency_penalty must be in [-2, 2]"),
    ({"presence_penalty": -3}, "presence_penalty must be in [-2, 2]"),
    ({"n": 0}, "n must be in [1, 128]"),
    ({"n": 129}, "n must be in [1, 128]"),
    ({"min_new_tokens": 10, "max_new_tokens": 5},
     "min_new_tokens must be in [0, max_new_tokens=5]"),
    ({"stop": ["ok", ""]}, "stop entries must be non-empty strings"),
    ({"stop": 5}, "stop must be a string or a list of strings"),
    ({"stop_token_ids": [1, "2"]}, "stop_token_ids must be a list of integers"),
    ({"logit_bias": {100: 1.0}}, "logit_bias token id 100 is outside the vocabulary [0, 100)"),
    ({"logit_bias": {-1: 1.0}}, "outside the vocabulary"),
    ({"logit_bias": {"x": 1.0}}, "logit_bias keys must be token ids"),
    ({"logit_bias": {"1": "a"}}, "logit_bias values must be numbers"),
    ({"logit_bias": {"1": 1.0, 1: 2.0}}, "logit_bias has token id 1 twice"),
    ({"logit_bias": {"100": 1.0}}, "logit_bias token id 100 is outside"),
    ({"regex": "a", "ebnf": "root ::= 'a'"}, "at most one of json_schema, regex, ebnf"),
    ({"json_schema": "{not json"}, "json_schema is not valid JSON"),
    ({"json_schema": 5}, "json_schema must be a string"),
    ({"seed": "1"}, "seed must be an integer"),
    ({"seed": 1, "sampling_seed": 2}, "conflicting values for seed"),
    ([1, 2], "sampling_params must be an object"),
]


@pytest.mark.parametrize("d,msg", BAD)
def test_bad_dicts(d, msg):
    with pytest.raises(ValueError) as e:
        SamplingParams.from_dict(d).verify(vocab_size=100)
    assert msg in str(e.value)


def test_verify_rechecks_mutated_fields_and_vocab_is_optional():
    p = SamplingParams(logit_bias={10**6: 1.0})
    p.verify()  # no vocab size: only >= 0
    with pytest.raises(ValueError, match="outside the vocabulary"):
        p.verify(vocab_size=10)
    p = SamplingParams(stop_token_ids=[3, 10**6, -1])   # as SGLang: ids no model can sample are ignored
    p.verify(vocab_size=10)
    assert p.stop_token_ids == [3]
    p = SamplingParams()
    p.top_p = 0.0
    with pytest.raises(ValueError, match="top_p"):
        p.verify()


def test_is_greedy():
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=0.8, top_k=1).is_greedy
    assert not SamplingParams(temperature=0.8, top_k=2).is_greedy
    assert not SamplingParams().is_greedy


def test_to_dict_round_trips_through_json():
    p = SamplingParams.from_dict({"stop": "x", "seed": 3, "json_schema": {"type": "string"},
                                  "logit_bias": {"4": 1.5}, "top_k": 20})
    d = json.loads(json.dumps(p.to_dict()))  # string keys after JSON, like an HTTP client
    assert SamplingParams.from_dict(d) == p
    assert p.to_dict()["stop"] == ["x"] and p.to_dict()["seed"] == 3


def test_module_does_not_import_torch():
    code = ("import sys, radixlm.runtime.sampling_params; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_thinking_fields():
    p = SamplingParams.from_dict({"think_end_ids": (5, 6), "max_thinking_tokens": 10})
    p.verify(100)
    assert p.think_end_ids == [5, 6] and SamplingParams.from_dict(p.to_dict()) == p
    for bad, msg in [({"think_end_ids": []}, "non-empty list"), ({"think_end_ids": [1.5]}, "non-empty list"),
                     ({"max_thinking_tokens": "3", "think_end_ids": [1]}, "must be an integer")]:
        with pytest.raises(ValueError, match=msg):
            SamplingParams.from_dict(bad)
    for bad, msg in [({"max_thinking_tokens": 4}, "needs think_end_ids"),
                     ({"think_end_ids": [100]}, r"token ids in \[0, 100\)"),
                     ({"think_end_ids": [1], "max_thinking_tokens": -1}, ">= 0")]:
        with pytest.raises(ValueError, match=msg):
            SamplingParams.from_dict(bad).verify(100)
